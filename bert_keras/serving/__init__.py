"""Serving: SavedModel export (TF Serving and TF Hub styles), the TF1 and C-API loaders, a
client, and a local stand-in for tensorflow_model_server."""
