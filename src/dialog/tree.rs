//! `DialogTreeNode`: a dialog's place in the fork tree, ids only.
//!
//! The node holds no messages, so the whole tree of a run can be rebuilt from a
//! flat list of records. Live links are ids; walking the tree takes a lookup from
//! id to node (the Python original keeps in-process references instead).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A dialog's place in the fork tree (seed `DialogTreeNode`).
pub struct DialogTreeNode {
    /// Globally unique hex UUID.
    pub dialog_id: String,
    /// The agent that owns the dialog.
    pub owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The dialog this one was forked from; `None` for a root.
    pub parent_id: Option<String>,
    /// Messages kept from the parent at the fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_point: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The fork's `last_n` (0: a full copy).
    pub last_n: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The fork's `first_k`.
    pub first_k: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// The dialogs forked from this one, in order.
    pub children_ids: Vec<String>,
    /// Forks from the root (0 for a root).
    #[serde(default)]
    pub depth: usize,
}

impl DialogTreeNode {
    /// A root node with a fresh id.
    pub fn root(owner: impl Into<String>) -> DialogTreeNode {
        DialogTreeNode {
            dialog_id: new_dialog_id(),
            owner: owner.into(),
            parent_id: None,
            split_point: None,
            last_n: None,
            first_k: None,
            children_ids: Vec::new(),
            depth: 0,
        }
    }

    /// Whether the dialog was not forked from another.
    pub fn is_root(&self) -> bool {
        self.parent_id.is_none()
    }

    /// A new node under this one; records the child's id here.
    pub fn add_child(
        &mut self,
        split_point: usize,
        last_n: usize,
        first_k: usize,
    ) -> DialogTreeNode {
        let child = DialogTreeNode {
            dialog_id: new_dialog_id(),
            owner: self.owner.clone(),
            parent_id: Some(self.dialog_id.clone()),
            split_point: Some(split_point),
            last_n: Some(last_n),
            first_k: Some(first_k),
            children_ids: Vec::new(),
            depth: self.depth + 1,
        };
        self.children_ids.push(child.dialog_id.clone());
        child
    }

    /// Breadth-first ids of this node and everything forked from it that `lookup` knows.
    pub fn subtree_ids<'a, F>(&'a self, lookup: F) -> Vec<String>
    where
        F: Fn(&str) -> Option<&'a DialogTreeNode>,
    {
        let mut ids = vec![self.dialog_id.clone()];
        let mut queue = std::collections::VecDeque::from([self]);
        while let Some(node) = queue.pop_front() {
            for child_id in &node.children_ids {
                if let Some(child) = lookup(child_id) {
                    ids.push(child.dialog_id.clone());
                    queue.push_back(child);
                }
            }
        }
        ids
    }
}

/// A fresh dialog id: a random UUID in 32 hex digits.
pub fn new_dialog_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn children_link_both_ways_and_subtree_is_breadth_first() {
        let mut root = DialogTreeNode::root("coder");
        let mut a = root.add_child(5, 0, 1);
        let b = root.add_child(3, 2, 1);
        let a1 = a.add_child(5, 0, 1);
        assert_eq!(a.parent_id.as_deref(), Some(root.dialog_id.as_str()));
        assert_eq!(
            root.children_ids,
            vec![a.dialog_id.clone(), b.dialog_id.clone()]
        );
        assert_eq!(a1.depth, 2);
        assert!(root.is_root() && !a1.is_root());
        let nodes: HashMap<String, DialogTreeNode> = [a.clone(), b.clone(), a1.clone()]
            .into_iter()
            .map(|node| (node.dialog_id.clone(), node))
            .collect();
        let ids = root.subtree_ids(|id| nodes.get(id));
        assert_eq!(root_round_trip(&a1), a1);
        assert_eq!(
            ids,
            vec![root.dialog_id, a.dialog_id, b.dialog_id, a1.dialog_id]
        );
    }

    fn root_round_trip(node: &DialogTreeNode) -> DialogTreeNode {
        serde_json::from_value(serde_json::to_value(node).unwrap()).unwrap()
    }
}
