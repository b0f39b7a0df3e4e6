"""roar: Recursive ROAR, the faithfulness of NLP importance measures by masking and retraining."""

__version__ = "0.1.0"
