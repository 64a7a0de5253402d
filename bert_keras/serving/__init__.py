"""Serving: SavedModel export (TF Serving and TF Hub styles), the op gate per TF Serving
release, and a client; `tfserving/` holds the stand-ins for tensorflow_model_server (the TF1
and C-API loaders, the JSON codec and a local server)."""
