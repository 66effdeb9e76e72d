"""Adapters to agent frameworks; each module needs its extra installed.

- `sandkit.integrations.langchain`: LangChain/LangGraph tools (`sandkit[langchain]`)
- `sandkit.integrations.deepagents`: a deepagents sandbox backend (`sandkit[deepagents]`)
"""
