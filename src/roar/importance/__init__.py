"""Importance measures, one module each. Their specs are in :data:`roar.config.catalog.MEASURE_SPECS`;
:mod:`roar.importance.registry` builds them (imported only where a measure is computed)."""
