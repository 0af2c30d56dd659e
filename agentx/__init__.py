"""agentx: replay agentic LLM traces through a four-stage hardware cost model."""

__version__ = "0.1.0"
