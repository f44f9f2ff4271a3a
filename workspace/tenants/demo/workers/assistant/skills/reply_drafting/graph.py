"""The reply_drafting skill's graph: draft -> review -> (draft again, at most twice) -> a person
approves -> the approved draft is filed. Built by the runtime's LangGraph engine (docs/engines.md)."""

from __future__ import annotations

from typing import Any, TypedDict

MAX_REVISIONS = 2


class DraftState(TypedDict, total=False):
    task: str
    draft: str
    review: str
    revisions: int
    approved: bool
    output: str


def build_graph(ctx: Any) -> Any:
    from langgraph.graph import END, StateGraph

    async def draft(state: DraftState) -> dict[str, Any]:
        notes = f"\n\nReviewer's notes on the last draft:\n{state['review']}" if state.get("review") else ""
        system = {"role": "system", "content": ctx.instruction("draft")}
        reply = await ctx.llm.invoke([system, {"role": "user", "content": state["task"] + notes}])
        revisions = state.get("revisions", 0) + (1 if state.get("draft") else 0)
        return {"draft": reply.content, "revisions": revisions}

    async def review(state: DraftState) -> dict[str, Any]:
        reply = await ctx.llm.invoke(
            [{"role": "system", "content": ctx.instruction("review")}, {"role": "user", "content": state["draft"]}]
        )
        return {"review": reply.content}

    def after_review(state: DraftState) -> str:
        passed = state["review"].strip().upper().startswith("OK")
        return "approve" if passed or state.get("revisions", 0) >= MAX_REVISIONS else "draft"

    def approve(state: DraftState) -> dict[str, Any]:
        answer = ctx.interrupt({"question": "Send this reply?", "draft": state["draft"]})
        return {"approved": bool(answer.get("approved"))}

    async def file(state: DraftState) -> dict[str, Any]:
        if not state.get("approved"):
            return {"output": "Not filed: the draft was rejected."}
        path = f"files/drafts/approved/{ctx.thread_id}.md"
        saved = await ctx.tools.call("file_write", {"path": path, "content": state["draft"]})
        if saved.is_error:
            return {"output": f"Approved, but it could not be filed: {saved.content}"}
        return {"output": f"Approved and filed as {path}:\n\n{state['draft']}"}

    graph = StateGraph(DraftState)
    for name, node in (("draft", draft), ("review", review), ("approve", approve), ("file", file)):
        graph.add_node(name, node)
    graph.set_entry_point("draft")
    graph.add_edge("draft", "review")
    graph.add_conditional_edges("review", after_review, {"approve": "approve", "draft": "draft"})
    graph.add_edge("approve", "file")
    graph.add_edge("file", END)
    return graph.compile(checkpointer=ctx.checkpointer)
