"""Provenance of the code behind a study's outputs: write the code fingerprints, or prove a code change
left the outputs unchanged (``roar provenance verify``)."""

from __future__ import annotations

from pathlib import Path

import typer

from roar.cli.common import app, command, fail

provenance_app = typer.Typer(help="Which code made a study's outputs: fingerprints, and verifying code changes.",
                             no_args_is_help=True)
app.add_typer(provenance_app, name="provenance")


@command("update", group=provenance_app)
def provenance_update() -> None:
    """Write the current code's fingerprints to provenance.yaml (dvc.yaml reads them as params)."""
    from roar.config.layout import project_root
    from roar.pipeline.provenance import write_provenance

    root = project_root(Path("."))
    fingerprints = write_provenance(root)["fingerprints"]
    typer.echo(f"{root / 'provenance.yaml'}: prepare {fingerprints['prepare'][:12]}, train "
               f"{fingerprints['train'][:12]}, report {fingerprints['report'][:12]}, "
               f"{len(fingerprints['chain'])} measures")


@command("verify", group=provenance_app)
def provenance_verify(
    full_size: bool = typer.Option(False, "--full-size",
                                   help="Run the sample steps at their studies' own sizes (slow for paper-scale "
                                        "studies) instead of a few hundred examples and two epochs."),
) -> None:
    """Re-key every study's locked stages whose code changed, where sample steps recomputed under the
    old and the new code come out byte-identical; the rest stay stale for `dvc repro`."""
    from roar.config.layout import project_root
    from roar.launch.verify import verify_code_change

    result = verify_code_change(project_root(Path(".")), log=typer.echo, full_size=full_size)
    for entry in result.verified:
        scope = f" for {', '.join(entry['models'])} only" if "models" in entry else ""
        typer.echo(f"verified {entry['key']}{scope}: {entry['sample']} ({entry['files_identical']} files identical)")
    for study, count in result.rekeyed.items():
        typer.echo(f"{study}/dvc.lock: {count} stages re-keyed")
    for where, why in sorted(result.left.items()):
        typer.echo(f"stays stale: {where} ({why})", err=True)
    if result.failed:
        for key, differences in result.failed.items():
            typer.echo(f"changed {key}: {'; '.join(differences[:3])}", err=True)
        fail(RuntimeError(f"{len(result.left)} stages compute other outputs now ({', '.join(sorted(result.failed))}); "
                          "they stay stale: `dvc repro` (or `roar pipeline`) recomputes them"))
    if result.left:
        fail(RuntimeError(f"{len(result.left)} stages could not be verified; they stay stale: `dvc repro` "
                          "(or `roar pipeline`) recomputes them"))
