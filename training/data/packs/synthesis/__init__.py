"""Optional LLM synthesis: new training tasks proposed by any OpenAI-compatible endpoint,
kept only when they survive the same checks as the pack's own rows.

Why: a pack's templates give exact ground truth but only the phrasings someone wrote; an LLM
that reads the tool schemas proposes other requests and call chains. Its reply is untrusted
input (it may be malformed, huge, name tools that do not exist, or carry chat-template
markers), so every proposal passes three gates, and each rejection is counted by reason:

1. **format**: the reply parses (bounded size, JSON) into tasks whose query and expected
   calls name real tools, with arguments that validate against the tool's `inputSchema`
   (`jsonschema`; values that point into an earlier result are checked once filled);
2. **execution**: the calls run on the real server through `serving.mcp_client`, recorded
   in the dataset's `CallStore` like the pack generator's, and none may be a tool error;
3. **the suite**: the rows (built by the generator's own `build_row`) pass the per-row
   checks of the great-expectations suite, and the whole dataset then passes the suite.

Accepted rows go to TRAIN only, with template ids starting `llm-`: evaluation stays on the
pack's hand-written held-out templates. The LLM is shown schemas and a few executed calls
from TRAIN rows (never a test query), so it cannot copy a held-out phrasing into train.

The modules: `config` (the endpoint's settings), `report` (the counts and the refusal),
`proposal` (gate 1), `endpoint` (the prompt and the requests), `execution` (gate 2),
`screening` (gate 3) and `run` (the whole run).
"""
