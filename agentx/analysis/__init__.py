"""Analysis: SQL views over traces and runs, named queries, charts and the HTML report."""

from agentx.analysis.queries import NamedQuery, get_query, list_queries
from agentx.analysis.views import Database, QueryError, open_db

__all__ = ["Database", "NamedQuery", "QueryError", "get_query", "list_queries", "open_db"]
