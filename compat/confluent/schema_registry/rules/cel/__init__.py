"""CEL rules (``CEL``: a condition or transform of a whole message), with cel-python."""
