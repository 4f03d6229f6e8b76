"""`python -m yoke` runs the `yoke` command."""

from yoke.cli import main

main()
