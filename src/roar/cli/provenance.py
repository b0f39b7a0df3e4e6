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
def provenance_verify() -> None:
    """Re-key every study's locked stages whose code changed, where sample steps recomputed under the
    old and the new code come out byte-identical; the rest stay stale for `dvc repro`."""
    from roar.config.layout import project_root
    from roar.launch.verify import verify_code_change

    result = verify_code_change(project_root(Path(".")), log=typer.echo)
    for entry in result.verified:
        typer.echo(f"verified {entry['key']}: {entry['sample']} ({entry['files_identical']} files identical)")
    for study, count in result.rekeyed.items():
        typer.echo(f"{study}/dvc.lock: {count} stages re-keyed")
    if result.failed:
        for key, differences in result.failed.items():
            typer.echo(f"changed {key}: {'; '.join(differences[:3])}", err=True)
        fail(RuntimeError(f"{len(result.failed)} fingerprint keys compute other outputs now; their stages stay "
                          "stale: `dvc repro` (or `roar pipeline`) recomputes them"))
