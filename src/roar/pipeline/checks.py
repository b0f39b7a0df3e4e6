"""Checks of a study's existing outputs (``roar validate``): every data and model folder it reads,
each problem one line naming the file and what to do."""

from __future__ import annotations

from pathlib import Path

from roar.models.saved_model import check_model_folder


def existing_outputs(params: dict, root: Path = Path(".")) -> tuple[list[Path], list[Path]]:
    """The data and model folders that the (checked) study reads and that exist: prepared and
    all-masked data, the shared k = 0 and k = 100 models, and every chain step's data and model."""
    from roar.config.params import study_from_params
    from roar.config.layout import Layout, step_dir

    study = study_from_params(params)
    layout = Layout(root)
    data, models = [], []
    for dataset in study.datasets:
        for model in study.models:
            data += [layout.prepared(dataset, model), layout.all_masked(dataset, model)]
            for seed in study.seeds:
                models += [layout.shared_model(dataset, model, which, seed) for which in ("k0", "all")]
                for measure, recursive in study.chain_modes:
                    key = (dataset, model, measure, recursive, seed)
                    for k in study.steps:
                        data.append(step_dir(layout.chain_data(*key), k))
                        models.append(step_dir(layout.chain_models(*key), k))
    return [p for p in data if p.exists()], [p for p in models if p.exists()]


def check_outputs(params: dict, root: Path = Path(".")) -> int:
    """Check every existing data and model folder of the study; returns how many were checked."""
    from roar.data.storage import check_dataset

    data, models = existing_outputs(params, root)
    for folder in data:
        check_dataset(folder)
    for folder in models:
        check_model_folder(folder)
    return len(data) + len(models)
