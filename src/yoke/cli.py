"""The `yoke` command. It parses arguments and calls `asyncio.run` once, at the edge."""

from __future__ import annotations

import asyncio

import typer

import yoke

app = typer.Typer(
    name="yoke",
    help="yoke: a fair, durable, multi-tenant scheduler.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def demo(
    seconds: float = typer.Option(12.0, min=0.5, max=20.0, help="How long the flood runs."),
    seed: int = typer.Option(1, help="Seed of the arrival pattern."),
) -> None:
    """Watch one tenant flood a fair scheduler and a plain FIFO side by side."""
    from yoke.demo import run_demo

    asyncio.run(run_demo(seconds, seed=seed))


@app.command()
def version() -> None:
    """Print yoke's version."""
    typer.echo(yoke.__version__)


def main() -> None:
    app()
