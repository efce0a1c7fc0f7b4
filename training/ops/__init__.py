"""Operations code, apart from the ML stages: running the pipeline on one machine.

- `airflow`: Airflow's own services (`toolrl airflow up|status|down`) and its REST client.
- `demo`: the embedded demo (`toolrl demo`), local services on loopback, its report.
- `pages`: helpers shared by the HTML pages the pipeline writes (offline checks).

Nothing in `training`'s ML stages imports from here; this package imports them.
"""
