"""The project's own tools, grouped by what they need: `compute` (pure: math, units, dates),
`world` (the providers: weather, time, rates, translation, prices), `knowledge` (search over
the world data) and `notes` (per-session memory). `serving.tools.definitions` lists them.

Each tool's schema, semantic check and implementation sit side by side, so a change to one
is read beside the others.
"""
