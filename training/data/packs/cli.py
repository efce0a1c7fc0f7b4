"""`toolrl tools pack init | validate | generate`: write, check and use task packs.

Registered under the `tools` group by training/cli.py (`register_cli(tools_app)`); only
typer is imported at load time so `toolrl --help` stays instant. A pack argument is a file,
or the name of a pack that ships with the project (`time`, `memory`, `toolrl`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from training.data.packs.execute import ServerTool
    from training.data.packs.loader import LoadedPack, PackError
    from training.data.paraphrase import ParaphraseConfig


SourcesOption = Annotated[
    Path | None,
    typer.Option(
        "--sources",
        help="Tool sources YAML (`servers:` or `mcpServers:`) with the pack's server. "
        "Default: the pack's own `source:`.",
    ),
]
PackArgument = Annotated[
    str,
    typer.Argument(help="Pack file, or the name of a shipped pack (time, memory, toolrl)."),
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(message, fg="red", err=True)
    return typer.Exit(code)


def _invalid_pack(exc: PackError) -> typer.Exit:
    """Exit 2 with every problem of the pack, one a line."""
    return _fail("pack invalid:\n" + "\n".join(f"  {p}" for p in exc.problems))


def _first_error(exc: Exception) -> str:
    """`n: Input should be greater than or equal to 10` for a pydantic error."""
    errors: list[dict[str, object]] = getattr(exc, "errors", lambda: [])()
    if errors:
        first = errors[0]
        location = first.get("loc", ())
        parts = location if isinstance(location, tuple) else ()
        return f"{'.'.join(str(p) for p in parts)}: {first.get('msg')}"
    return str(exc)


def _load(text: str) -> LoadedPack:
    from training.data.packs.loader import PackError, load_pack, resolve_pack

    try:
        return load_pack(resolve_pack(text))
    except PackError as exc:
        raise _invalid_pack(exc) from exc


def _summary(loaded: LoadedPack) -> str:
    from training.data.packs.plan import template_pools

    pack = loaded.spec
    pools = template_pools(pack)
    train = sum(len(p["train"]) for p in pools.values())
    test = sum(len(p["test"]) for p in pools.values())
    categories: dict[str, int] = {}
    for intent in pack.intents:
        categories[intent.category.value] = categories.get(intent.category.value, 0) + 1
    return (
        f"pack {pack.pack!r} for server {pack.server!r}: {len(pack.intents)} intents "
        f"({json.dumps(categories)}), {train + test} templates, {test} held out for test, "
        f"languages {', '.join(pack.languages)}"
    )


def init_pack(
    server: Annotated[str, typer.Option("--server", help="The server's name in the sources.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the pack YAML.")],
    sources_file: SourcesOption = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out.")] = False,
) -> None:
    """Write a starting pack from the server's tool schemas, to edit.

    One intent per tool (placeholder phrasings, slots from the schema: enums
    become value lists, numbers ranges, strings TODO examples), one
    irrelevance and one clarification intent. It passes `validate` as
    written; replace the TODOs before generating.
    """
    from serving.mcp_client.base import McpClientError
    from serving.mcp_client.catalog import ToolCatalog
    from serving.mcp_client.sources import ToolSources, load_tool_sources
    from training.data.packs.scaffold import scaffold_text
    from training.data.packs.server import server_tools

    if out.exists() and not force:
        raise _fail(f"{out} exists; pass --force to overwrite")
    if sources_file is None:
        raise _fail("--sources is required: the file that says how to reach the server")
    try:
        sources: ToolSources = load_tool_sources(sources_file)
    except (OSError, ValueError) as exc:
        raise _fail(f"tool sources unreadable: {exc}") from exc
    if server not in sources.servers:
        raise _fail(f"{sources_file} has no server {server!r} ({', '.join(sources.servers)})")
    only = sources.model_copy(update={"servers": {server: sources.servers[server]}})

    async def listed() -> Any:
        catalog = ToolCatalog(only, base_dir=sources_file.parent.resolve())
        try:
            return await server_tools(catalog, server)
        finally:
            await catalog.close()

    try:
        tools = asyncio.run(listed())
    except McpClientError as exc:
        raise _fail(f"tool catalog failed:\n{exc}") from exc
    source = sources.servers[server].model_dump(exclude_defaults=True)
    source.pop("transport", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(scaffold_text(server, tools, str(out), source), encoding="utf-8")
    typer.echo(f"wrote {out}: {len(tools)} tools; edit the TODOs, then:")
    typer.echo(f"  toolrl tools pack validate {out} --sources {sources_file}")


def validate_pack(
    pack: PackArgument,
    sources_file: SourcesOption = None,
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Check the file only; do not ask the server."),
    ] = False,
) -> None:
    """Check a pack against its format and against the server's tools.

    First the file (types, slots, templates, references), then the
    server's tools/list: unknown tools, arguments that do not fill the
    inputSchema, chains that point nowhere. Exit 2 with every problem,
    each with file:line and intent.
    """
    from serving.mcp_client.base import McpClientError
    from training.data.packs.check import check_pack
    from training.data.packs.loader import PackError
    from training.data.packs.server import pack_client, server_tools

    loaded = _load(pack)
    if offline:
        typer.secho(f"file OK (server not asked): {_summary(loaded)}", fg="green")
        return

    async def listed() -> dict[str, ServerTool]:
        async with pack_client(loaded, sources_file) as client:
            return await server_tools(client, loaded.spec.server)

    try:
        tools = asyncio.run(listed())
    except (PackError, OSError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    except McpClientError as exc:
        raise _fail(f"tool catalog failed:\n{exc}") from exc
    problems = check_pack(loaded, {name: t.input_schema for name, t in tools.items()})
    if problems:
        raise _fail(
            f"pack invalid ({len(problems)} problem(s)):\n" + "\n".join(f"  {p}" for p in problems)
        )
    typer.secho(f"pack OK: {_summary(loaded)}", fg="green")


def generate_pack(
    pack: PackArgument,
    out: Annotated[Path, typer.Option("--out", help="Output directory (created if missing).")],
    sources_file: SourcesOption = None,
    n: Annotated[int, typer.Option(help="Planned rows, train + test.")] = 2_000,
    seed: Annotated[int, typer.Option(help="Random seed: same seed and store, same rows.")] = 0,
    test_fraction: Annotated[float, typer.Option(help="Share of rows in test.")] = 0.1,
    store: Annotated[
        Path | None,
        typer.Option(
            help="Call store (SQLite) to record into; calls it already holds are not sent "
            "again. Default: OUT/calls.sqlite."
        ),
    ] = None,
    max_invalid_fraction: Annotated[
        float, typer.Option(help="Fail when more rows than this share are invalid.")
    ] = 0.05,
    concurrency: Annotated[int, typer.Option(help="Calls in flight at once.")] = 32,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Generate a dataset from a pack, every expected call executed on the server.

    Writes the built-in layout (train/test parquet, manifest.json) plus
    tools.json (the server's schemas) and the call store the manifest
    points to. Rows whose calls fail are left out and reported.
    """
    run_pack_generation(
        pack,
        out,
        sources_file,
        n,
        seed,
        test_fraction,
        store,
        max_invalid_fraction,
        concurrency,
        quiet,
    )


def _print_synthesis(manifest: dict[str, Any], out: Path) -> None:
    """The dataset written and the acceptance report (`manifest.synthesis`), for a person."""
    report = manifest["synthesis"]
    typer.echo(
        f"dataset {manifest['dataset_version']}: {manifest['rows']} rows "
        f"({manifest['splits']}) -> {out}"
    )
    typer.echo(
        f"synthesis: {report['proposed']} proposed, {report['accepted']} accepted "
        f"({report['rate']:.0%}), rejected {json.dumps(report['rejected'])}"
    )
    for example in report["examples"][:5]:
        typer.echo(f"  e.g. {example}")
    typer.echo(f"next: toolrl data validate {out}")


def synthesize_pack(
    pack: PackArgument,
    out: Annotated[Path, typer.Option("--out", help="Output directory (created if missing).")],
    llm_url: Annotated[
        str,
        typer.Option("--llm-url", help="OpenAI-compatible base URL, e.g. http://host:8000/v1."),
    ],
    llm_model: Annotated[str, typer.Option("--llm-model", help="Model name to ask.")],
    proposals: Annotated[int, typer.Option("--proposals", help="Tasks to ask the LLM for.")] = 20,
    per_request: Annotated[int, typer.Option(help="Tasks asked per request.")] = 4,
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the endpoint's bearer token."),
    ] = None,
    sources_file: SourcesOption = None,
    n: Annotated[int, typer.Option(help="Planned template rows, as in `generate`.")] = 2_000,
    seed: Annotated[int, typer.Option(help="Random seed of the template rows.")] = 0,
    test_fraction: Annotated[float, typer.Option(help="Share of template rows in test.")] = 0.1,
    timeout_s: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 60.0,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Generate a pack's dataset, plus train tasks proposed by an LLM.

    The pack's rows as `generate` writes them, then --proposals tasks asked
    from the endpoint (shown the tool schemas and a few executed calls).
    A proposal is kept only if it parses into a query with calls to real
    tools whose arguments fit the inputSchema, its calls run on the server
    without a tool error (recorded in the call store), and its row passes
    the dataset suite. Kept tasks go to train only (template ids `llm-...`);
    the acceptance report is printed and written to manifest.synthesis.
    """
    import os

    from serving.mcp_client.base import McpClientError
    from training.data.packs.loader import PackError
    from training.data.packs.plan import GenerationError
    from training.data.packs.synthesis.config import SynthesisConfig
    from training.data.packs.synthesis.run import synthesize_from_sources

    loaded = _load(pack)
    api_key = os.environ.get(api_key_env) if api_key_env else None
    try:
        llm = SynthesisConfig(
            url=llm_url,
            model=llm_model,
            api_key=api_key,
            proposals=proposals,
            per_request=per_request,
            timeout_s=timeout_s,
        )
        dataset = synthesize_from_sources(
            loaded,
            out,
            llm,
            sources_file,
            n=n,
            seed=seed,
            test_fraction=test_fraction,
            progress=not quiet,
        )
    except PackError as exc:
        raise _invalid_pack(exc) from exc
    except (GenerationError, McpClientError, OSError, ValueError) as exc:
        raise _fail(f"synthesis failed: {exc}") from exc
    _print_synthesis(dataset.manifest, out)


def register_cli(tools_app: typer.Typer) -> None:
    """Add the `pack` command group under `toolrl tools`."""
    pack_app = typer.Typer(
        help="Task packs: the tasks for one MCP server as YAML (intents, phrasings, slots, "
        "expected calls and chains). Write one with `init`, check it with `validate`, turn it "
        "into a dataset with `generate` (plus LLM-proposed tasks: `synthesize`).",
        no_args_is_help=True,
    )
    pack_app.command("init")(init_pack)
    pack_app.command("validate")(validate_pack)
    pack_app.command("generate")(generate_pack)
    pack_app.command("synthesize")(synthesize_pack)
    tools_app.add_typer(pack_app, name="pack")


def run_pack_generation(
    pack: str,
    out: Path,
    sources_file: Path | None,
    n: int,
    seed: int,
    test_fraction: float,
    store: Path | None = None,
    max_invalid_fraction: float = 0.05,
    concurrency: int = 32,
    quiet: bool = False,
    chinese_fraction: float | None = None,
    paraphrase: ParaphraseConfig | None = None,
) -> None:
    """`tools pack generate` and `data generate`: generate, write, report. `chinese_fraction`
    overrides the pack's share of Chinese rows; `paraphrase` rewrites the queries through an
    LLM afterwards (`training.data.paraphrase`)."""
    from pydantic import ValidationError

    from serving.mcp_client.base import McpClientError
    from training.data.config import GenerationConfig
    from training.data.packs.generate import generate_from_sources
    from training.data.packs.loader import PackError
    from training.data.packs.plan import GenerationError, with_chinese_fraction

    loaded = _load(pack)
    try:  # the settings first: a bad one is refused before any server starts
        GenerationConfig(n=n, seed=seed, test_fraction=test_fraction)
        loaded = with_chinese_fraction(loaded, chinese_fraction)
    except ValidationError as exc:
        raise _fail(f"generation failed: {_first_error(exc)}") from exc
    except (PackError, ValueError) as exc:
        raise _fail(f"generation failed: {exc}") from exc
    try:
        dataset = generate_from_sources(
            loaded,
            out,
            sources_file,
            n=n,
            seed=seed,
            test_fraction=test_fraction,
            store_path=store,
            max_invalid_fraction=max_invalid_fraction,
            concurrency=concurrency,
            progress=not quiet,
        )
    except PackError as exc:
        raise _invalid_pack(exc) from exc
    except (GenerationError, McpClientError, ValidationError, OSError, ValueError) as exc:
        raise _fail(f"generation failed: {exc}") from exc
    if paraphrase is not None:
        from training.data.paraphrase import paraphrase_dataset

        stats = paraphrase_dataset(dataset.rows, dataset.manifest, out, paraphrase, not quiet)
        typer.echo(
            f"paraphrased {stats.accepted}/{stats.attempted} queries "
            f"({stats.rejected} rejected, {stats.failed} endpoint failures kept as templates)"
        )
    _print_generation(dataset.manifest, out)


def _print_generation(manifest: dict[str, Any], out: Path) -> None:
    """The dataset written, its calls and its invalid rows (`manifest.pack`), for a person."""
    info, calls = manifest["pack"], manifest["call_store"]
    typer.echo(
        f"dataset {manifest['dataset_version']}: {manifest['rows']} rows "
        f"({manifest['splits']}) from pack {info['name']!r} -> {out}"
    )
    typer.echo(f"categories: {json.dumps(manifest['category'])}")
    typer.echo(
        f"calls: {calls['calls']} recorded in {calls['path']} (digest {calls['digest'][:16]}), "
        f"{calls['sent']} sent, {calls['from_store'] + calls['shared_in_flight']} deduplicated"
    )
    if info["invalid_rows"]:
        typer.secho(
            f"{info['invalid_rows']} planned row(s) invalid and left out: "
            f"{json.dumps(info['invalid_reasons'])}",
            fg="yellow",
        )
        for example in info["invalid_examples"]:
            typer.echo(f"  e.g. {example}")
    typer.echo(f"next: toolrl data validate {out}")
