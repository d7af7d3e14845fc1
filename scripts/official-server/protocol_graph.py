"""`lead_agent` for the official server: the graph the SDK suite's thread-stream tests
(tests/sdk/python/test_thread_stream.py) drive, so the same tests run against Fawn and
against `langgraph dev` and their transcripts can be compared.

A `create_react_agent` over `ChatOpenAI` pointed at the mock LLM (`MOCK_LLM_URL`, run in
`--mode directives`: a user message's `@mock {…}` says what the model does), with the few
tools those tests call, shaped like Fawn's lead agent's:

* `ls(path)`: lists a (virtual) directory; always answers the same text.
* `ask_clarification(question, clarification_type, context?, options?)`: DeerFlow's
  clarification question as a LangGraph `interrupt()`; the answer becomes the tool result.
"""

from __future__ import annotations

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from langgraph.types import interrupt


def _model() -> ChatOpenAI:
    url = os.environ.get("MOCK_LLM_URL", "").strip()
    if not url:
        raise RuntimeError("MOCK_LLM_URL is not set (the mock LLM's base URL)")
    return ChatOpenAI(
        model="fawn-mock",
        base_url=url,
        api_key="bench",
        max_retries=0,
        timeout=60,
        streaming=True,
    )


@tool
def ls(path: str) -> str:
    """List the files and directories at `path` (under /mnt/user-data).

    Args:
        path: absolute virtual path of the directory.
    """
    return f"{path}/outputs\n{path}/uploads\n{path}/workspace"


@tool
def ask_clarification(
    question: str,
    clarification_type: str,
    context: str | None = None,
    options: list[str] | None = None,
) -> str:
    """Ask the user a question and wait for the answer.

    Args:
        question: the question.
        clarification_type: missing_info, ambiguous_requirement, approach_choice,
            risk_confirmation or suggestion.
        context: why you ask.
        options: the choices, when there are some.
    """
    answer = interrupt(
        {
            "question": question,
            "clarification_type": clarification_type,
            "context": context,
            "options": options or [],
        }
    )
    return str(answer)


lead_agent = create_react_agent(_model(), [ls, ask_clarification], name="lead_agent")
