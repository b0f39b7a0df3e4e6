"""Importance measures, one module each. Their names are in :data:`roar.config.catalog.MEASURES_BY_NAME`;
:mod:`roar.importance.registry` builds them (imported only where a measure is computed)."""
