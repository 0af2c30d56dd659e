"""The capacity planner: the cheapest configuration of each system that serves a trace's load
within a service level (``agentx compare``). ``slo`` parses the service level, ``prices`` the
cited $ per GPU-hour defaults, ``search`` prices layouts and GPU counts with the cost model:
``load`` is what it searches over, ``evaluate`` prices one configuration (on ``serving``'s
steady state), ``frontier`` draws tokens/s per GPU against tokens/s per user.
"""
