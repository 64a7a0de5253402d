"""Serving: SavedModel export for TF Serving (`export`) and in TF Hub's style
(`hub_export`), LiteRT and ONNX exports (`deploy`), what each task's export answers
(`serving_tasks`), the op gate per TF Serving release (`ops`) and a client; `tfserving/`
holds the stand-ins for tensorflow_model_server (the TF1 and C-API loaders, the JSON codec
and a local server)."""
