"""An app module that cannot be imported: its executors fail their boots."""

raise ImportError("broken on purpose")
