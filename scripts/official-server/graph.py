"""Graphs for benchmarking the official LangGraph server beside Fawn.

Both graphs are `create_react_agent` (langgraph.prebuilt) agents over `ChatOpenAI` pointed
at the OpenAI-compatible mock LLM named by `MOCK_LLM_URL` (`fawn-mock-llm`, e.g.
`http://127.0.0.1:PORT/v1`). With the mock in `rules` mode calling `present_files`, one
turn is model -> tool call -> model, as in Fawn's lead agent.

* `agent`: the DeerFlow-shaped turn (`server_load --workload deerflow`): a system prompt,
  per-thread file tools (`ls`, `read_file`, `glob`, `grep`, `write_file`, `str_replace`), `present_files`
  (adds to the thread's `artifacts`, like DeerFlow's), and title generation: after the
  first model answer of a thread, a post-model hook asks the same model for a title, as
  Fawn does with `title.enabled: true` and `title.model_name` set.
* `agent_minimal`: today's minimal workload (`server_load`'s default): `present_files`
  only, no system prompt, no title.

Files live under `OFFICIAL_WORKSPACE_ROOT` (default: a fresh temporary directory), one
directory per thread, with DeerFlow's virtual `/mnt/user-data/...` paths mapped into it.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, NotRequired

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from langgraph.prebuilt.chat_agent_executor import AgentState
from langgraph.types import Command

VIRTUAL_ROOT = "/mnt/user-data"
OUTPUTS = f"{VIRTUAL_ROOT}/outputs"


def _mock_url() -> str:
    url = os.environ.get("MOCK_LLM_URL", "").strip()
    if not url:
        raise RuntimeError(
            "MOCK_LLM_URL is not set: point it at the OpenAI-compatible mock LLM, "
            "e.g. MOCK_LLM_URL=http://127.0.0.1:PORT/v1 (fawn-mock-llm prints its URL)"
        )
    return url


def _model() -> ChatOpenAI:
    return ChatOpenAI(
        model="fawn-mock",
        base_url=_mock_url(),
        api_key="bench",
        max_retries=0,
        timeout=60,
    )


WORKSPACE_ROOT = Path(
    os.environ.get("OFFICIAL_WORKSPACE_ROOT")
    or tempfile.mkdtemp(prefix="official-bench-")
)


def _thread_dir(config: RunnableConfig) -> Path:
    thread_id = str(config.get("configurable", {}).get("thread_id") or "no-thread")
    return WORKSPACE_ROOT / thread_id


def _host_path(path: str, config: RunnableConfig) -> Path:
    """The host path of a virtual `/mnt/user-data/...` path; refuses anything outside."""
    virtual = Path("/") / path.strip()
    parts = []
    for part in virtual.parts[1:]:
        if part == "..":
            if not parts:
                raise ValueError(f"path outside {VIRTUAL_ROOT}: {path}")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    normal = "/" + "/".join(parts)
    if normal != VIRTUAL_ROOT and not normal.startswith(VIRTUAL_ROOT + "/"):
        raise ValueError(f"only paths under {VIRTUAL_ROOT} are allowed: {path}")
    rel = normal[len(VIRTUAL_ROOT) :].lstrip("/")
    return _thread_dir(config) / "user-data" / rel


@tool
def ls(description: str, path: str, config: RunnableConfig) -> str:
    """List the files and directories at `path` (under /mnt/user-data).

    Args:
        description: why you list this directory.
        path: absolute virtual path of the directory.
    """
    try:
        target = _host_path(path, config)
        if not target.exists():
            return f"Error: {path} does not exist"
        return "\n".join(sorted(p.name for p in target.iterdir())) or "(empty)"
    except (OSError, ValueError) as e:
        return f"Error: {e}"


@tool
def read_file(description: str, path: str, config: RunnableConfig) -> str:
    """Read a text file under /mnt/user-data.

    Args:
        description: why you read this file.
        path: absolute virtual path of the file.
    """
    try:
        return _host_path(path, config).read_text(encoding="utf-8")
    except (OSError, ValueError) as e:
        return f"Error: {e}"


@tool
def glob(description: str, pattern: str, path: str, config: RunnableConfig) -> str:
    """Find files whose path under `path` matches a glob `pattern` (e.g. `**/*.md`).

    Args:
        description: why you search.
        pattern: glob pattern, relative to `path`.
        path: absolute virtual path of the directory to search.
    """
    try:
        base = _host_path(path, config)
        hits = sorted(str(p.relative_to(base)) for p in base.glob(pattern))[:200]
        return "\n".join(hits) or "No files match"
    except (OSError, ValueError) as e:
        return f"Error: {e}"


@tool
def grep(description: str, pattern: str, path: str, config: RunnableConfig) -> str:
    """Find the lines matching a regular expression in the files under `path`.

    Args:
        description: why you search.
        pattern: regular expression.
        path: absolute virtual path of a file or directory.
    """
    try:
        regex = re.compile(pattern)
        base = _host_path(path, config)
        if base.is_file():
            root, files = base.parent, [base]
        else:
            root, files = base, sorted(p for p in base.rglob("*") if p.is_file())
        hits = []
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{f.relative_to(root)}:{n}: {line}")
        return "\n".join(hits[:100]) or "No matches"
    except (OSError, ValueError, re.error) as e:
        return f"Error: {e}"


@tool
def write_file(description: str, path: str, content: str, config: RunnableConfig) -> str:
    """Write `content` to a file under /mnt/user-data, creating parent directories.

    Args:
        description: why you write this file.
        path: absolute virtual path of the file.
        content: the whole new text of the file.
    """
    try:
        target = _host_path(path, config)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return "OK"
    except (OSError, ValueError) as e:
        return f"Error: {e}"


@tool
def str_replace(
    description: str, path: str, old_str: str, new_str: str, config: RunnableConfig
) -> str:
    """Replace the single occurrence of `old_str` with `new_str` in a file.

    Args:
        description: why you edit this file.
        path: absolute virtual path of the file.
        old_str: text to replace; must occur exactly once.
        new_str: replacement text.
    """
    try:
        target = _host_path(path, config)
        text = target.read_text(encoding="utf-8")
        if text.count(old_str) != 1:
            return f"Error: old_str occurs {text.count(old_str)} times in {path}"
        target.write_text(text.replace(old_str, new_str), encoding="utf-8")
        return "OK"
    except (OSError, ValueError) as e:
        return f"Error: {e}"


@tool
def present_files(
    filepaths: list[str], tool_call_id: Annotated[str, InjectedToolCallId]
) -> Command:
    """Show finished files from /mnt/user-data/outputs to the user.

    Args:
        filepaths: absolute paths of the files to show, each inside /mnt/user-data/outputs.
    """
    normalized: list[str] = []
    for p in filepaths:
        v = "/" + p.strip().lstrip("/")
        if not v.startswith(OUTPUTS + "/") or "/../" in v:
            return Command(
                update={
                    "messages": [
                        ToolMessage(
                            f"Error: Only files in {OUTPUTS} can be presented: {p}",
                            tool_call_id=tool_call_id,
                            status="error",
                        )
                    ]
                }
            )
        if v not in normalized:
            normalized.append(v)
    return Command(
        update={
            "artifacts": normalized,
            "messages": [
                ToolMessage("Successfully presented files", tool_call_id=tool_call_id)
            ],
        }
    )


def _merge_artifacts(left: list[str] | None, right: list[str] | None) -> list[str]:
    out = list(left or [])
    for a in right or []:
        if a not in out:
            out.append(a)
    return out


class DeerState(AgentState):
    title: NotRequired[str]
    artifacts: NotRequired[Annotated[list[str], _merge_artifacts]]


# About as long as the system prompt of Fawn's lead agent in the deerflow workload (the
# mock reports ~880 prompt tokens for the first model call of both), so both servers move
# requests of the same size.
SYSTEM_PROMPT = """You are a capable general assistant working for one user in their own workspace.

<role>
You help the user with research, writing, analysis and small engineering tasks. You work step
by step, you use the tools you are given instead of guessing, and you keep the user informed
about what you did and what is left.
</role>

<thinking_style>
- Before acting, decide what is clear in the request, what is ambiguous and what is missing.
- When something essential is missing, ask the user first instead of starting on guesses.
- Plan the steps, then act. Keep your reasoning short and focused on the task.
- After thinking, always write a visible answer: thinking alone is not a reply.
</thinking_style>

<clarification>
Work in this order: clarify, then plan, then act. Ask the user a single focused question when:
1. required information is missing (a file, a target, a scope);
2. the request can reasonably mean several different things;
3. several valid approaches exist and the choice belongs to the user;
4. the action is destructive or hard to undo (deleting or overwriting files).
Offer the options you see when they are known. Ask before starting the work, not halfway.
</clarification>

<skills>
Skills are folders of instructions, scripts and references for recurring kinds of work (for
example writing a research report, building a slide deck or analysing a spreadsheet). When a
request matches a skill, read its SKILL.md first and follow it: it knows the expected layout
of the deliverable, the checks to run before presenting it and the mistakes to avoid. Load
the files a skill refers to only when you need them. No skill is installed in this
workspace, so rely on the tools below and on your own judgement for every request.
</skills>

<working_directory>
- /mnt/user-data/uploads: files the user uploaded.
- /mnt/user-data/workspace: your scratch space; relative paths start here.
- /mnt/user-data/outputs: deliverables. Save every file meant for the user here, then show it
  with `present_files`.
</working_directory>

<tools_usage>
- Use `ls`, `glob`, `grep` and `read_file` to look at files before you change them.
- Use `write_file` to create a file and `str_replace` to change part of an existing file
  rather than rewriting it whole.
- When a deliverable is finished, save it under /mnt/user-data/outputs and call
  `present_files` with its path; several related files can be presented in one call.
- Never present scratch or intermediate files, only finished results.
</tools_usage>

<response_style>
- Be clear and concise; prefer short paragraphs and lists over long prose.
- Use Markdown where it helps: headings for long answers, code blocks for code.
- Lead with the result, then the details.
</response_style>

<citations>
When you use information from a source, cite it inline right after the claim as a Markdown
link with the source's title, and end the answer with a short "Sources" list of every source
you cited.
</citations>

<critical_reminders>
- Clarify first when the request is unclear.
- Deliverables go to /mnt/user-data/outputs and are shown with `present_files`.
- Edit files with `str_replace` rather than rewriting them whole.
- Refer to generated images by their full path under /mnt/user-data/outputs.
- Answer in the user's language.
- Always end your turn with a response to the user.
</critical_reminders>
"""

TITLE_PROMPT = """Write a short title (at most {max_words} words) for the conversation below. Use the user's language. Answer with the title only: no quotes, no punctuation at the end, no explanation.

User: {user}
Assistant: {assistant}"""


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        b.get("text", "") if isinstance(b, dict) else str(b) for b in content or []
    )


async def title_hook(state: DeerState) -> dict:
    """After the first model answer of an untitled thread, ask the model for a title."""
    if state.get("title"):
        return {}
    messages = state["messages"]
    users = [m for m in messages if isinstance(m, HumanMessage)]
    ais = [m for m in messages if isinstance(m, AIMessage)]
    if len(users) != 1 or not ais:
        return {}
    user = _text(users[0].content)
    prompt = TITLE_PROMPT.format(
        max_words=6, user=user[:500], assistant=_text(ais[0].content)[:500]
    )
    fallback = (user[:50].rstrip() + "...") if len(user) > 50 else (user or "New Conversation")
    try:
        answer = await _title_model.ainvoke([HumanMessage(prompt)])
        lines = [ln.strip() for ln in _text(answer.content).splitlines() if ln.strip()]
        title = lines[0].strip("\"'“”").strip()[:60] if lines else ""
    except Exception:  # the title never fails the run, as in DeerFlow
        title = ""
    return {"title": title or fallback}


_title_model = _model()

agent = create_react_agent(
    _model(),
    [ls, read_file, glob, grep, write_file, str_replace, present_files],
    prompt=SYSTEM_PROMPT,
    post_model_hook=title_hook,
    state_schema=DeerState,
    name="agent",
)

agent_minimal = create_react_agent(
    _model(), [present_files], state_schema=DeerState, name="agent_minimal"
)
