"""JSONata rules (``JSONATA``: a transform of a whole message), with jsonata-python."""
