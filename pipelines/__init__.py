"""End-to-end Keras scripts behind the `bert-keras` command line."""
