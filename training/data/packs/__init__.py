"""Task packs: the tasks for one MCP server as data (a YAML file), not code.

- `model`: the typed pack (pydantic, `extra="forbid"`): intents, phrasings, slots, steps.
- `loader`: bounded safe YAML (size, depth, aliases, duplicate keys) with file:line errors.
- `refs`: slot templates (`{city.tz}`) and result references (`$steps[0].result.x | hhmm`),
  filled without `eval`.
- `slots`: seeded slot draws from lists, ranges and named pools.
- `check`: the pack against its server's tools (unknown tools, schema fit, dangling chains).
- `split`: which templates are held out for test.
- `results`: a tool result text as a ground-truth object.
- `execute`: ground truth by execution, concurrent, deduplicated, recorded in a CallStore.
- `server`: which tool sources reach the pack's server (the project's own: in-process).
- `generate`: plan, execute and write a dataset version: the project's one generator (the
  built-in dataset is the `toolrl` pack's, `generate_builtin_dataset`).
- `truth`: validation of a pack dataset's rows from its tool snapshot and call store.
- `scaffold`: a starting pack from a server's schemas (`toolrl tools pack init`).
- `cli`: the `toolrl tools pack` commands.

Library code: no Airflow, no CLI framework outside `cli`.
"""
