"""Small utilities shared by every stage: checked reading of file fields, name suggestions, STAX_LOGS channels."""
