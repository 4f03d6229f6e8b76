"""Example yoke apps: `yoke serve --app examples.shop:app`."""
