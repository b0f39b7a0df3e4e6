"""Studies side by side: the default at the project root, others under ``studies/``."""

from __future__ import annotations

from pathlib import Path

import typer

from roar.cli.common import app, command


study_app = typer.Typer(help="Studies side by side: the default at the project root, others under studies/.",
                        no_args_is_help=True)
app.add_typer(study_app, name="study")


@command("list", group=study_app)
def study_list() -> None:
    """The studies of this project, each with its folder and study name."""
    from roar.config.params import load_params
    from roar.config.layout import STUDIES, project_root
    from roar.launch.studies import DEFAULT, study_names

    root = project_root()
    for name in study_names(root):
        folder = root if name == DEFAULT else root / STUDIES / name
        typer.echo(f"{name:<28} {folder.relative_to(root).as_posix():<36} "
                   f"study.name={load_params(folder / 'params.yaml')['study']['name']}")


@command("new", group=study_app)
def study_new(name: str = typer.Argument(..., help="Folder name under studies/."),
              source: Path = typer.Option(..., "--from", help="Params file to start from (copied, comments kept).")) -> None:
    """Create studies/NAME with a copy of a params file and the generated dvc.yaml."""
    from roar.config.layout import project_root
    from roar.launch.studies import new_study

    folder = new_study(name, source, project_root())
    typer.echo(f"{folder}: params.yaml, dvc.yaml; run it with `roar pipeline --study {name}`")


@command("sync", group=study_app)
def study_sync() -> None:
    """Regenerate every study folder's dvc.yaml from the project's dvc.yaml (after editing that one)."""
    from roar.config.layout import project_root
    from roar.launch.studies import sync_studies

    root = project_root()
    written = sync_studies(root)
    typer.echo("\n".join(f"{folder.relative_to(root)}/dvc.yaml: regenerated" for folder in written)
               or "every study dvc.yaml is up to date")


@command("status", group=study_app)
def study_status(name: str = typer.Argument(None, help="One study (default: every study).")) -> None:
    """Each study: up to date, not run here (and how to run or pull it), or stale (and why). A plain
    `dvc status` at the root lists every study's stages, and on a fresh clone every output as missing."""
    from roar.config.layout import project_root
    from roar.launch.studies import resolve_study, study_names, study_status as status_of

    root = project_root()
    names = study_names(root) if name is None else [name]
    if name is not None:
        resolve_study(name, root)
    width = max(len(n) for n in names)
    for each in names:
        typer.echo(status_of(root, each).line(width))


@command("compare", group=study_app)
def study_compare(names: list[str] = typer.Argument(..., help="Studies to compare, the reference first "
                                                               "(`default` or a folder under studies/)."),
                  ks: str = typer.Option("10,20,30", "--k", help="Masking steps whose mean score each row shows."),
                  out: Path = typer.Option(None, "--out", help="Also write comparison.md, racu.csv and curves.csv "
                                                               "into this folder (replaced whole)."),
                  published: Path = typer.Option(None, "--published", help="Published RACU values to show beside "
                                                 "the chains they report, e.g. "
                                                 "configs/published/madsen-2022-racu.csv.")) -> None:
    """Studies side by side from their committed reports: what each changes against the first, its RACU
    against the Recursive and the plain ROAR random curve, and its mean score at a few k; with
    ``--published``, a paper's values beside them."""
    from roar.config.layout import project_root
    from roar.config.params import load_params
    from roar.core.errors import RoarError
    from roar.core.fileio import atomic_dir
    from roar.launch.studies import resolve_study
    from roar.report.comparison import compare_studies, comparison_markdown, read_points, read_published

    try:
        steps = [int(k) for k in ks.split(",")]
    except ValueError:
        raise RoarError(f"--k {ks!r}: give masking steps as integers separated by commas, e.g. 10,20,30") from None
    published_values = None if published is None else read_published(published)
    root = project_root()
    folders = [(name, resolve_study(name, root)) for name in names]
    studies = [(name, load_params(folder / "params.yaml"), read_points(folder, name)) for name, folder in folders]
    racu, curves = compare_studies(studies, steps, published_values)
    table = comparison_markdown(racu, curves, steps)
    typer.echo(table, nl=False)
    if out is not None:
        with atomic_dir(out) as tmp:
            (tmp / "comparison.md").write_text(table, encoding="utf-8")
            racu.to_csv(tmp / "racu.csv", index=False, float_format="%.6f")
            curves.to_csv(tmp / "curves.csv", index=False, float_format="%.6f")
        typer.echo(f"written: {out}/comparison.md, racu.csv, curves.csv")
