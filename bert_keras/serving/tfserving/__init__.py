"""TF Serving without the model server: the TF1 session loader and its request checks
(`session`), TF Serving's C++ loader through the C API (`c_api_loader` + `c_api_predict.c`),
the JSON tensor codec of its REST API (`json_tensor`) and `bert-keras serve`'s stand-in
server (`local_server`). The export code (`bert_keras.serving.export`, `hub_export`) does not
import this package; tests, `bert-keras export`'s checks and `bert-keras serve` do."""
