//! The shape of one run's graph, as LangChain's `create_agent` builds it: one node per
//! middleware state hook (`<Middleware>.<hook>`), the `model` and `tools` nodes, and the edges
//! between them. The loop in [`crate::engine`] walks this graph; `describe()` draws it and
//! `next_after_update()` follows its edges.

use fawn_middleware::{Chain, Hook, JumpTo, Middleware};
use fawn_state::{MessageKind, Messages, ThreadState};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

pub(crate) const START: &str = "__start__";
pub(crate) const END: &str = "__end__";
pub(crate) const MODEL: &str = "model";
pub(crate) const TOOLS: &str = "tools";
/// The pseudo node `update_state(as_node="__input__")` writes as.
pub(crate) const INPUT: &str = "__input__";

/// A position in the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Start,
    BeforeAgent(usize),
    BeforeModel(usize),
    Model,
    /// Index in run order (the chain's reverse list order).
    AfterModel(usize),
    Tools,
    /// Index in run order (the chain's reverse list order).
    AfterAgent(usize),
    End,
}

struct HookNodes {
    middlewares: Vec<Arc<dyn Middleware>>,
    names: Vec<String>,
}

impl HookNodes {
    fn new(chain: &Chain, hook: Hook) -> HookNodes {
        let middlewares = chain.state_hook_order(hook);
        let names = middlewares
            .iter()
            .map(|m| hook.node_name(m.name()))
            .collect();
        HookNodes { middlewares, names }
    }

    fn len(&self) -> usize {
        self.middlewares.len()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// The nodes and edges of one run's graph.
pub(crate) struct Topology {
    before_agent: HookNodes,
    before_model: HookNodes,
    after_model: HookNodes,
    after_agent: HookNodes,
}

impl Topology {
    pub(crate) fn new(chain: &Chain) -> Topology {
        Topology {
            before_agent: HookNodes::new(chain, Hook::BeforeAgent),
            before_model: HookNodes::new(chain, Hook::BeforeModel),
            after_model: HookNodes::new(chain, Hook::AfterModel),
            after_agent: HookNodes::new(chain, Hook::AfterAgent),
        }
    }

    /// The node name as LangGraph reports it.
    pub(crate) fn name(&self, node: Node) -> &str {
        match node {
            Node::Start => START,
            Node::BeforeAgent(i) => &self.before_agent.names[i],
            Node::BeforeModel(i) => &self.before_model.names[i],
            Node::Model => MODEL,
            Node::AfterModel(i) => &self.after_model.names[i],
            Node::Tools => TOOLS,
            Node::AfterAgent(i) => &self.after_agent.names[i],
            Node::End => END,
        }
    }

    /// The middleware whose hook a node runs.
    pub(crate) fn middleware(&self, node: Node) -> Option<(&Arc<dyn Middleware>, Hook)> {
        match node {
            Node::BeforeAgent(i) => Some((&self.before_agent.middlewares[i], Hook::BeforeAgent)),
            Node::BeforeModel(i) => Some((&self.before_model.middlewares[i], Hook::BeforeModel)),
            Node::AfterModel(i) => Some((&self.after_model.middlewares[i], Hook::AfterModel)),
            Node::AfterAgent(i) => Some((&self.after_agent.middlewares[i], Hook::AfterAgent)),
            _ => None,
        }
    }

    /// Finds a node by name.
    pub(crate) fn node(&self, name: &str) -> Option<Node> {
        match name {
            START => return Some(Node::Start),
            END => return Some(Node::End),
            MODEL => return Some(Node::Model),
            TOOLS => return Some(Node::Tools),
            _ => {}
        }
        if let Some(i) = self.before_agent.position(name) {
            return Some(Node::BeforeAgent(i));
        }
        if let Some(i) = self.before_model.position(name) {
            return Some(Node::BeforeModel(i));
        }
        if let Some(i) = self.after_model.position(name) {
            return Some(Node::AfterModel(i));
        }
        self.after_agent.position(name).map(Node::AfterAgent)
    }

    /// Where `__start__` leads: the first `before_agent` node, else the loop entry.
    pub(crate) fn entry(&self) -> Node {
        if self.before_agent.len() > 0 {
            Node::BeforeAgent(0)
        } else {
            self.loop_entry()
        }
    }

    /// Where each model turn starts: the first `before_model` node, else `model`.
    pub(crate) fn loop_entry(&self) -> Node {
        if self.before_model.len() > 0 {
            Node::BeforeModel(0)
        } else {
            Node::Model
        }
    }

    /// Where the agent goes when it is done: the first `after_agent` node, else the end.
    pub(crate) fn exit(&self) -> Node {
        if self.after_agent.len() > 0 {
            Node::AfterAgent(0)
        } else {
            Node::End
        }
    }

    /// The node after `node` when no jump was requested. `state` is the state after `node`
    /// ran (it decides between `tools` and the exit after the model).
    pub(crate) fn next(&self, node: Node, state: &ThreadState) -> Node {
        match node {
            Node::Start => self.entry(),
            Node::BeforeAgent(i) if i + 1 < self.before_agent.len() => Node::BeforeAgent(i + 1),
            Node::BeforeAgent(_) => self.loop_entry(),
            Node::BeforeModel(i) if i + 1 < self.before_model.len() => Node::BeforeModel(i + 1),
            Node::BeforeModel(_) => Node::Model,
            Node::Model if self.after_model.len() > 0 => Node::AfterModel(0),
            Node::AfterModel(i) if i + 1 < self.after_model.len() => Node::AfterModel(i + 1),
            Node::Model | Node::AfterModel(_) => self.route_after_model(state),
            Node::Tools => self.loop_entry(),
            Node::AfterAgent(i) if i + 1 < self.after_agent.len() => Node::AfterAgent(i + 1),
            Node::AfterAgent(_) | Node::End => Node::End,
        }
    }

    /// After the last `after_model` node: `tools` when the last AI message has tool calls
    /// without answers, else the exit.
    pub(crate) fn route_after_model(&self, state: &ThreadState) -> Node {
        if has_pending_tool_calls(&state.messages) {
            Node::Tools
        } else {
            self.exit()
        }
    }

    /// Where a hook's `jump_to` leads (LangChain: `model` → loop entry, `end` → exit).
    pub(crate) fn jump(&self, from: Node, jump: JumpTo) -> Node {
        if matches!(from, Node::AfterAgent(_)) {
            // After-agent hooks run once the agent is done; only `end` is meaningful there.
            return if jump == JumpTo::End {
                Node::End
            } else {
                self.next(from, &ThreadState::default())
            };
        }
        match jump {
            JumpTo::Model => self.loop_entry(),
            JumpTo::Tools => Node::Tools,
            JumpTo::End => self.exit(),
        }
    }

    /// Every node in drawing order.
    pub(crate) fn nodes(&self) -> Vec<Node> {
        let mut v = vec![Node::Start];
        v.extend((0..self.before_agent.len()).map(Node::BeforeAgent));
        v.extend((0..self.before_model.len()).map(Node::BeforeModel));
        v.push(Node::Model);
        v.extend((0..self.after_model.len()).map(Node::AfterModel));
        v.push(Node::Tools);
        v.extend((0..self.after_agent.len()).map(Node::AfterAgent));
        v.push(Node::End);
        v
    }

    /// LangChain's drawable-graph JSON: `{nodes: [{id, type, data}], edges: [{source,
    /// target, conditional?}]}`.
    pub(crate) fn drawable(&self) -> Value {
        let nodes: Vec<Value> = self
            .nodes()
            .into_iter()
            .map(|n| {
                let name = self.name(n);
                match n {
                    Node::Start | Node::End => json!({"id": name, "type": "schema", "data": name}),
                    _ => json!({"id": name, "type": "runnable", "data": {
                        "id": ["langgraph", "utils", "runnable", "RunnableCallable"],
                        "name": name,
                    }}),
                }
            })
            .collect();
        let mut edges: Vec<Value> = Vec::new();
        let mut seen: HashSet<(String, String)> = HashSet::new();
        let mut edge = |from: Node, to: Node, conditional: bool| {
            let (s, t) = (self.name(from).to_string(), self.name(to).to_string());
            if seen.insert((s.clone(), t.clone())) {
                let mut e = json!({"source": s, "target": t});
                if conditional {
                    e["conditional"] = Value::Bool(true);
                }
                edges.push(e);
            }
        };
        edge(Node::Start, self.entry(), false);
        for i in 0..self.before_agent.len() {
            let n = Node::BeforeAgent(i);
            edge(n, self.next(n, &ThreadState::default()), false);
        }
        for i in 0..self.before_model.len() {
            let n = Node::BeforeModel(i);
            edge(n, self.next(n, &ThreadState::default()), false);
        }
        if self.after_model.len() > 0 {
            edge(Node::Model, Node::AfterModel(0), false);
            for i in 0..self.after_model.len() - 1 {
                edge(Node::AfterModel(i), Node::AfterModel(i + 1), false);
            }
            let last = Node::AfterModel(self.after_model.len() - 1);
            edge(last, Node::Tools, true);
            edge(last, self.exit(), true);
        } else {
            edge(Node::Model, Node::Tools, true);
            edge(Node::Model, self.exit(), true);
        }
        edge(Node::Tools, self.loop_entry(), true);
        edge(Node::Tools, self.exit(), true);
        for i in 0..self.after_agent.len() {
            let n = Node::AfterAgent(i);
            edge(n, self.next(n, &ThreadState::default()), false);
        }
        json!({"nodes": nodes, "edges": edges})
    }
}

/// The index of the last AI message.
pub(crate) fn last_ai_index(messages: &Messages) -> Option<usize> {
    messages.iter().rposition(|m| m.kind.is_ai())
}

/// True when the last AI message has tool calls (valid or not) that no later tool message
/// answers.
pub(crate) fn has_pending_tool_calls(messages: &Messages) -> bool {
    let Some(i) = last_ai_index(messages) else {
        return false;
    };
    let ai = &messages[i];
    if ai.tool_calls.is_empty() && ai.invalid_tool_calls.is_empty() {
        return false;
    }
    let answered: HashSet<&str> = messages
        .range(i + 1..)
        .filter(|m| m.kind == MessageKind::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    ai.tool_calls
        .iter()
        .map(|c| c.id.as_deref().unwrap_or_default())
        .chain(
            ai.invalid_tool_calls
                .iter()
                .map(|c| c.id.as_deref().unwrap_or_default()),
        )
        .any(|id| !answered.contains(id))
}
