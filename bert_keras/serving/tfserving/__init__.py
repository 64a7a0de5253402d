"""TF Serving without the model server: the TF1 session loader and its request checks
(`session`), TF Serving's C++ loader through the C API (`c_api_loader` + `c_api_predict.c`),
the JSON tensor codec of its REST API (`json_tensor` for requests, `json_reply` for replies)
and `bert-keras serve`'s stand-in server (`local_server`, with its REST API in `rest_api`
and its HTTP connections in `rest_http`). The export code (`bert_keras.serving.export`,
`hub_export`) does not import this package; tests, `bert-keras export`'s checks and
`bert-keras serve` do."""
