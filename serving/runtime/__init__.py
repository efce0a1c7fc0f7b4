"""The shared foundation for process supervision, ports and retries.

Why one package: the model servers, the MCP stdio client, the Airflow services, the Ray job
driver and the demo each start child processes, pick free ports and retry flaky endpoints.
Written once each, here, at the bottom of `serving` (it imports nothing else of the
project), every layer above can use them without importing a sibling it does not need.
"""
