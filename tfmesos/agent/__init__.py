"""What runs inside a task: the agent (:mod:`.main`) that connects to tfrun
and supervises the command, and the small programs it or the local backend
starts. Standard library only: a task's Python needs nothing installed but
this package (tests/test_agent_isolated.py)."""
