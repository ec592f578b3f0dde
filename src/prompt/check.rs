//! What a template or an expression needs, and what it gets wrong, read from
//! its syntax tree before any value exists (issue 12): the names it needs
//! from the context, the names it only reads behind a guard (`is defined`,
//! `| default`), the attributes it reads on context names, and the mistakes
//! no value can fix — an unknown filter, test or function, a method call on a
//! value from the context (JSON values have no methods), a template that
//! includes another.
//!
//! Scoping follows minijinja: `set`, `for` targets, `loop`, macro arguments,
//! `caller`, `self`, `super` and `with` names are the template's own; the
//! environment's globals (`range`, `dict`, `namespace`, `debug`) are not
//! needed from the context. Whether a needed name is available is the
//! caller's business (`tactic::check`).

use std::collections::{BTreeSet, HashSet};

use minijinja::machinery::ast::{self, CallArg, CallType, Expr, Stmt};

use super::builtins::{Kind, exists, globals, suggestion};

/// What a template reads and gets wrong, found without rendering it.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Analysis {
    /// Context names it reads without a guard: rendering fails without them.
    pub required: BTreeSet<String>,
    /// Context names it reads only behind `is defined` / `| default`.
    pub optional: BTreeSet<String>,
    /// `name.attribute` (or `name['attribute']`) read directly on a context name.
    pub attributes: BTreeSet<(String, String)>,
    /// Mistakes that fail whatever the values, with their line.
    pub problems: Vec<(String, usize)>,
}

/// The most operators one tag (`{{ … }}`, `{% … %}`) or one expression may
/// chain. minijinja makes `a + b + …` (and `.`, `|`, `[`, `(`, `and`, …) a
/// tree one level deeper per operator and walks that tree recursively when
/// it compiles it, so a few thousand of them in one tag overflow the stack:
/// a crash where a prompt file deserves an error line. No template a person
/// writes comes near this (a 200-case `or` chain has 400).
pub(crate) const MAX_CHAIN: usize = 1_000;

/// The first tag of `source` (all of it when `in_expr`: a standalone
/// expression) that chains more than [`MAX_CHAIN`] operators: the error and
/// its line. A source the lexer refuses is left to minijinja's own error.
pub(crate) fn overlong_chain(source: &str, in_expr: bool) -> Option<(String, usize)> {
    use minijinja::machinery::Token;
    let mut operators = 0;
    let mut line = 1;
    for token in minijinja::machinery::tokenize(source, in_expr, Default::default()) {
        let (token, span) = token.ok()?;
        match token {
            Token::VariableStart | Token::BlockStart => {
                operators = 0;
                line = span.start_line;
            }
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::FloorDiv
            | Token::Pow
            | Token::Mod
            | Token::Dot
            | Token::Tilde
            | Token::Pipe
            | Token::Eq
            | Token::Ne
            | Token::Gt
            | Token::Gte
            | Token::Lt
            | Token::Lte
            | Token::BracketOpen
            | Token::ParenOpen
            | Token::BraceOpen => operators += 1,
            Token::Ident("and" | "or" | "not" | "if" | "else" | "is" | "in") => operators += 1,
            _ => {}
        }
        if operators > MAX_CHAIN {
            return Some((
                format!(
                    "more than {MAX_CHAIN} operators (`+`, `~`, `.`, `|`, `and`, …) in one {}: split it up",
                    if in_expr { "expression" } else { "tag" }
                ),
                usize::from(line),
            ));
        }
    }
    None
}

/// Parses and analyzes a template (`Err`: minijinja's syntax error).
pub(crate) fn template(source: &str) -> Result<Analysis, minijinja::Error> {
    let tree = minijinja::machinery::parse(source, "prompt", Default::default())?;
    let mut walker = Walker::default();
    walker.statement(&tree);
    Ok(walker.analysis)
}

/// Parses and analyzes a standalone expression (`if:`, `until:`, …).
pub(crate) fn expression(source: &str) -> Result<Analysis, minijinja::Error> {
    let tree = minijinja::machinery::parse_expr(source)?;
    let mut walker = Walker::default();
    walker.expression(&tree);
    Ok(walker.analysis)
}

#[derive(Default)]
struct Walker<'a> {
    /// Names the template assigned, innermost scope last.
    scopes: Vec<HashSet<&'a str>>,
    /// Names known to be defined here (inside `{% if x is defined %}` …).
    guards: Vec<&'a str>,
    analysis: Analysis,
}

impl<'a> Walker<'a> {
    fn is_local(&self, name: &str) -> bool {
        self.scopes.iter().any(|scope| scope.contains(name))
    }

    /// A name the context must (or, behind a guard, may) provide.
    fn is_context(&self, name: &str) -> bool {
        !self.is_local(name) && !globals().contains(name)
    }

    fn assign(&mut self, name: &'a str) {
        if self.scopes.is_empty() {
            self.scopes.push(HashSet::new());
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name);
        }
    }

    fn assign_target(&mut self, target: &'a Expr<'a>) {
        match target {
            Expr::Var(var) => self.assign(var.id),
            Expr::List(list) => list.items.iter().for_each(|item| self.assign_target(item)),
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.assign_target(item)),
            // `{% set ns.count = … %}` writes into a namespace it reads.
            Expr::GetAttr(attribute) => self.expression(&attribute.expr),
            _ => {}
        }
    }

    fn problem(&mut self, message: String, line: u16) {
        self.analysis.problems.push((message, usize::from(line)));
    }

    /// A use of context name `name`; `guarded`: behind `is defined` or `default`.
    fn read(&mut self, name: &str, guarded: bool) {
        if !self.is_context(name) {
            return;
        }
        if guarded || self.guards.contains(&name) {
            self.analysis.optional.insert(name.to_string());
        } else {
            self.analysis.required.insert(name.to_string());
        }
    }

    /// Runs `visit` with `names` known to be defined.
    fn guarded(&mut self, names: Vec<&'a str>, visit: impl FnOnce(&mut Self)) {
        let depth = self.guards.len();
        self.guards.extend(names);
        visit(self);
        self.guards.truncate(depth);
    }

    fn scoped(&mut self, visit: impl FnOnce(&mut Self)) {
        self.scopes.push(HashSet::new());
        visit(self);
        self.scopes.pop();
    }

    fn statements(&mut self, statements: &'a [Stmt<'a>]) {
        statements
            .iter()
            .for_each(|statement| self.statement(statement));
    }

    fn statement(&mut self, statement: &'a Stmt<'a>) {
        match statement {
            Stmt::Template(template) => {
                self.assign("self");
                self.statements(&template.children);
            }
            Stmt::EmitExpr(emit) => self.expression(&emit.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::ForLoop(for_loop) => {
                self.expression(&for_loop.iter);
                self.scoped(|walker| {
                    walker.assign("loop");
                    walker.assign_target(&for_loop.target);
                    if let Some(filter) = &for_loop.filter_expr {
                        walker.expression(filter);
                    }
                    walker.statements(&for_loop.body);
                });
                self.scoped(|walker| walker.statements(&for_loop.else_body));
            }
            // No scope: a `set` inside an `if` is seen after it (as at run
            // time when the branch ran). Guards hold in their branch only.
            Stmt::IfCond(condition) => {
                self.expression(&condition.expr);
                let when_true = defined_when(&condition.expr, true);
                self.guarded(when_true, |walker| walker.statements(&condition.true_body));
                let when_false = defined_when(&condition.expr, false);
                self.guarded(when_false, |walker| {
                    walker.statements(&condition.false_body)
                });
            }
            Stmt::WithBlock(with) => self.scoped(|walker| {
                for (target, value) in &with.assignments {
                    walker.expression(value);
                    walker.assign_target(target);
                }
                walker.statements(&with.body);
            }),
            Stmt::Set(set) => {
                self.expression(&set.expr);
                self.assign_target(&set.target);
            }
            Stmt::SetBlock(set) => {
                self.scoped(|walker| walker.statements(&set.body));
                if let Some(filter) = &set.filter {
                    self.expression(filter);
                }
                self.assign_target(&set.target);
            }
            Stmt::AutoEscape(block) => {
                self.expression(&block.enabled);
                self.scoped(|walker| walker.statements(&block.body));
            }
            Stmt::FilterBlock(block) => {
                self.expression(&block.filter);
                self.scoped(|walker| walker.statements(&block.body));
            }
            Stmt::Block(block) => self.scoped(|walker| {
                walker.assign("super");
                walker.statements(&block.body);
            }),
            Stmt::Extends(_) | Stmt::Include(_) => {
                self.problem(
                    "a prompt is one template: `extends` and `include` have no other \
                     template to read; put the text in this file"
                        .into(),
                    statement_line(statement),
                );
            }
            Stmt::Import(import) => {
                self.problem(
                    "a prompt is one template: `import` has no other template to read; \
                     define the macro in this file"
                        .into(),
                    statement_line(statement),
                );
                self.assign_target(&import.name);
            }
            Stmt::FromImport(import) => {
                self.problem(
                    "a prompt is one template: `from … import` has no other template to \
                     read; define the macro in this file"
                        .into(),
                    statement_line(statement),
                );
                for (name, alias) in &import.names {
                    self.assign_target(alias.as_ref().unwrap_or(name));
                }
            }
            Stmt::Macro(definition) => {
                self.assign(definition.name);
                self.macro_body(definition);
            }
            Stmt::CallBlock(block) => {
                self.call(&block.call, block.call.span().start_line);
                self.macro_body(&block.macro_decl);
            }
            Stmt::Do(statement) => self.call(&statement.call, statement.call.span().start_line),
        }
    }

    fn macro_body(&mut self, definition: &'a ast::Macro<'a>) {
        definition
            .defaults
            .iter()
            .for_each(|value| self.expression(value));
        self.scoped(|walker| {
            walker.assign("caller");
            definition
                .args
                .iter()
                .for_each(|argument| walker.assign_target(argument));
            walker.statements(&definition.body);
        });
    }

    fn arguments(&mut self, arguments: &'a [CallArg<'a>]) {
        for argument in arguments {
            match argument {
                CallArg::Pos(value)
                | CallArg::Kwarg(_, value)
                | CallArg::PosSplat(value)
                | CallArg::KwargSplat(value) => self.expression(value),
            }
        }
    }

    fn call(&mut self, call: &'a ast::Call<'a>, line: u16) {
        match call.identify_call() {
            CallType::Function(name) => {
                if !self.is_local(name) && !globals().contains(name) {
                    let known: Vec<&str> = globals().iter().map(String::as_str).collect();
                    self.problem(
                        format!(
                            "unknown function `{name}`{} (functions: {})",
                            crate::suggest::hint(name, known.iter().copied()),
                            known.join(", ")
                        ),
                        line,
                    );
                }
            }
            CallType::Method(receiver, name) => {
                if let Some(root) = root_name(receiver)
                    && self.is_context(root)
                {
                    let value = path_text(receiver);
                    self.problem(
                        format!(
                            "values from the task and the steps have no methods: \
                             `{value}.{name}()`; use a filter (`{value} | {name}`)"
                        ),
                        line,
                    );
                }
                self.expression(receiver);
            }
            CallType::Block(_) => {}
            CallType::Object(callee) => self.expression(callee),
        }
        self.arguments(&call.args);
    }

    fn expression(&mut self, expression: &'a Expr<'a>) {
        match expression {
            Expr::Var(var) => self.read(var.id, false),
            Expr::Const(_) => {}
            Expr::Slice(slice) => {
                self.expression(&slice.expr);
                for bound in [&slice.start, &slice.stop, &slice.step]
                    .into_iter()
                    .flatten()
                {
                    self.expression(bound);
                }
            }
            Expr::UnaryOp(operation) => self.expression(&operation.expr),
            Expr::BinOp(operation) => {
                self.expression(&operation.left);
                // `x is defined and x.y`, `x is undefined or x.y`: the right
                // side only runs when the left side made `x` safe.
                let guard = match operation.op {
                    ast::BinOpKind::ScAnd => defined_when(&operation.left, true),
                    ast::BinOpKind::ScOr => defined_when(&operation.left, false),
                    _ => Vec::new(),
                };
                self.guarded(guard, |walker| walker.expression(&operation.right));
            }
            Expr::Compare(compare) => {
                self.expression(&compare.expr);
                compare
                    .ops
                    .iter()
                    .for_each(|operation| self.expression(&operation.expr));
            }
            Expr::IfExpr(choice) => {
                self.expression(&choice.test_expr);
                let when_true = defined_when(&choice.test_expr, true);
                self.guarded(when_true, |walker| walker.expression(&choice.true_expr));
                if let Some(otherwise) = &choice.false_expr {
                    let when_false = defined_when(&choice.test_expr, false);
                    self.guarded(when_false, |walker| walker.expression(otherwise));
                }
            }
            Expr::Filter(filter) => {
                if !exists(Kind::Filter, filter.name) {
                    self.problem(
                        format!(
                            "unknown filter `{}`{}",
                            filter.name,
                            suggestion(filter.name, Kind::Filter)
                        ),
                        filter.span().start_line,
                    );
                }
                match (&filter.expr, filter.name) {
                    (Some(Expr::Var(var)), "default" | "d") => self.read(var.id, true),
                    (Some(value), _) => self.expression(value),
                    (None, _) => {}
                }
                self.arguments(&filter.args);
            }
            Expr::Test(test) => {
                if !exists(Kind::Test, test.name) {
                    self.problem(
                        format!(
                            "unknown test `{}`{}",
                            test.name,
                            suggestion(test.name, Kind::Test)
                        ),
                        test.span().start_line,
                    );
                }
                match (&test.expr, test.name) {
                    (Expr::Var(var), "defined" | "undefined") => self.read(var.id, true),
                    (value, _) => self.expression(value),
                }
                self.arguments(&test.args);
            }
            Expr::GetAttr(attribute) => {
                if let Expr::Var(var) = &attribute.expr
                    && self.is_context(var.id)
                {
                    self.analysis
                        .attributes
                        .insert((var.id.to_string(), attribute.name.to_string()));
                }
                self.expression(&attribute.expr);
            }
            Expr::GetItem(item) => {
                if let (Expr::Var(var), Expr::Const(key)) = (&item.expr, &item.subscript_expr)
                    && let Some(key) = key.value.as_str()
                    && self.is_context(var.id)
                {
                    self.analysis
                        .attributes
                        .insert((var.id.to_string(), key.to_string()));
                }
                self.expression(&item.expr);
                self.expression(&item.subscript_expr);
            }
            Expr::Call(call) => self.call(call, call.span().start_line),
            Expr::List(list) => list.items.iter().for_each(|item| self.expression(item)),
            Expr::Tuple(tuple) => tuple.items.iter().for_each(|item| self.expression(item)),
            Expr::Map(map) => {
                for (key, value) in map.keys.iter().zip(&map.values) {
                    self.expression(key);
                    self.expression(value);
                }
            }
        }
    }
}

/// Names that `condition` proves defined when it is `outcome`:
/// `x is defined` (true), `x is undefined` (false), through `not`, `and`
/// (true) and `or` (false).
fn defined_when<'a>(condition: &Expr<'a>, outcome: bool) -> Vec<&'a str> {
    match condition {
        Expr::Test(test) => match (&test.expr, test.name, outcome) {
            (Expr::Var(var), "defined", true) | (Expr::Var(var), "undefined", false) => {
                vec![var.id]
            }
            _ => Vec::new(),
        },
        Expr::UnaryOp(operation) if matches!(operation.op, ast::UnaryOpKind::Not) => {
            defined_when(&operation.expr, !outcome)
        }
        Expr::BinOp(operation) => match (&operation.op, outcome) {
            (ast::BinOpKind::ScAnd, true) | (ast::BinOpKind::ScOr, false) => {
                let mut names = defined_when(&operation.left, outcome);
                names.extend(defined_when(&operation.right, outcome));
                names
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The variable an attribute chain starts from (`a` of `a.b.c`).
fn root_name<'a>(expression: &Expr<'a>) -> Option<&'a str> {
    match expression {
        Expr::Var(var) => Some(var.id),
        Expr::GetAttr(attribute) => root_name(&attribute.expr),
        Expr::GetItem(item) => root_name(&item.expr),
        _ => None,
    }
}

/// `a.b.c` as written (items as `[…]`), for messages.
fn path_text(expression: &Expr<'_>) -> String {
    match expression {
        Expr::Var(var) => var.id.to_string(),
        Expr::GetAttr(attribute) => format!("{}.{}", path_text(&attribute.expr), attribute.name),
        Expr::GetItem(item) => format!("{}[…]", path_text(&item.expr)),
        _ => "…".to_string(),
    }
}

fn statement_line(statement: &Stmt<'_>) -> u16 {
    match statement {
        Stmt::Extends(node) => node.span().start_line,
        Stmt::Include(node) => node.span().start_line,
        Stmt::Import(node) => node.span().start_line,
        Stmt::FromImport(node) => node.span().start_line,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `template` needs `required`, may use `optional`, and has no problem.
    #[track_caller]
    fn valid(template: &str, required: &[&str], optional: &[&str]) {
        let analysis = super::template(template).unwrap();
        assert_eq!(analysis.problems, [], "{template}");
        let names = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
        assert_eq!(analysis.required, names(required), "required by {template}");
        assert_eq!(analysis.optional, names(optional), "optional in {template}");
    }

    /// `template` has one problem, containing `expected`, on `line`.
    #[track_caller]
    fn invalid(template: &str, expected: &str, line: usize) {
        let analysis = super::template(template).unwrap();
        assert_eq!(
            analysis.problems.len(),
            1,
            "{template}: {:?}",
            analysis.problems
        );
        let (message, at) = &analysis.problems[0];
        assert!(message.contains(expected), "{template}: {message}");
        assert_eq!(*at, line, "{template}");
    }

    #[test]
    fn builtins_and_template_locals_are_not_needed_from_the_context() {
        valid("{% for i in range(3) %}{{ i }}{% endfor %}", &[], &[]);
        valid("{{ dict(a=1).a }} {{ debug() | length }}", &[], &[]);
        valid(
            "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
            &["xs"],
            &[],
        );
        valid(
            "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ loop.cycle('a', 'b') }}{% if loop.changed(x) %}!{% endif %}{% endfor %}",
            &["xs"],
            &[],
        );
        valid(
            "{% for item in tree recursive %}{{ item.name }}{{ loop(item.children) }}{% endfor %}",
            &["tree"],
            &[],
        );
        valid(
            "{% macro row(cell, sep=', ') %}{{ cell }}{{ sep }}{{ caller() }}{% endmacro %}{% call row(task) %}x{% endcall %}{{ row(1) }}",
            &["task"],
            &[],
        );
        valid(
            "{% set block %}{{ task }}{% endset %}{{ block | upper }}",
            &["task"],
            &[],
        );
        valid(
            "{% with a = task, b = 2 %}{{ a }}{{ b }}{% endwith %}",
            &["task"],
            &[],
        );
        valid(
            "{% block body %}{{ task }}{% endblock %}{{ self.body() }}",
            &["task"],
            &[],
        );
        valid(
            "{% filter upper %}{{ task }}{% endfilter %}",
            &["task"],
            &[],
        );
        valid(
            "{% for x in xs %}{% if x %}{% continue %}{% endif %}{% break %}{% endfor %}",
            &["xs"],
            &[],
        );
        valid(
            "{% if c %}{% set note = 'x' %}{% endif %}{{ note }}",
            &["c"],
            &[],
        );
        valid(
            "{{ task | default('none') }} {{ tone | d('plain') }}",
            &[],
            &["task", "tone"],
        );
    }

    #[test]
    fn guarded_names_are_optional() {
        valid(
            "{% if notes is defined %}{{ notes }}{% endif %}",
            &[],
            &["notes"],
        );
        valid(
            "{% if notes is undefined %}-{% else %}{{ notes.x }}{% endif %}",
            &[],
            &["notes"],
        );
        valid(
            "{% if not notes is defined %}-{% else %}{{ notes }}{% endif %}",
            &[],
            &["notes"],
        );
        valid(
            "{{ notes if notes is defined else 'none' }}",
            &[],
            &["notes"],
        );
        valid(
            "{{ a is defined and a.b }} {{ c is undefined or c.d }}",
            &[],
            &["a", "c"],
        );
        valid(
            "{% if a is defined and b is defined %}{{ a }}{{ b }}{% endif %}",
            &[],
            &["a", "b"],
        );
        // Used once without a guard: needed.
        valid(
            "{% if a is defined %}{{ a }}{% endif %}{{ a }}",
            &["a"],
            &["a"],
        );
        // `or` proves nothing on its true side.
        valid(
            "{% if a is defined or b %}{{ a }}{% endif %}",
            &["a", "b"],
            &["a"],
        );
        // A guard on `a` says nothing about `a.b`'s base when `a` is missing.
        valid("{{ a.b | default('x') }}", &["a"], &[]);
    }

    #[test]
    fn mistakes_no_value_can_fix_are_found_with_their_line() {
        invalid("{{ task | nosuch }}", "unknown filter `nosuch`", 1);
        invalid(
            "x\n{{ task | lenght }}",
            "unknown filter `lenght`; did you mean `length`?",
            2,
        );
        invalid(
            "{% if task is strnig %}{% endif %}",
            "did you mean `string`?",
            1,
        );
        invalid(
            "{{ lipsum(2) }}",
            "unknown function `lipsum` (functions: debug, dict, namespace, range)",
            1,
        );
        invalid(
            "{% set c = cycler('a', 'b') %}",
            "unknown function `cycler`",
            1,
        );
        invalid("{{ joiner() }}", "unknown function `joiner`", 1);
        invalid("{{ rnage(3) }}", "did you mean `range`?", 1);
        invalid(
            "{{ task.upper() }}",
            "`task.upper()`; use a filter (`task | upper`)",
            1,
        );
        invalid("{{ draft.content.strip() }}", "`draft.content.strip()`", 1);
        invalid("{% include 'other.md' %}", "a prompt is one template", 1);
        invalid(
            "{% filter nosuch %}x{% endfilter %}",
            "unknown filter `nosuch`",
            1,
        );
        // Inside a branch that may never run: still wrong.
        invalid(
            "{% if false %}{{ 1 | nosuch }}{% endif %}",
            "unknown filter",
            1,
        );
        let analysis = super::template("{{ a | x }}{{ b | y }}").unwrap();
        assert_eq!(analysis.problems.len(), 2, "every mistake, not the first");
    }

    #[test]
    fn attributes_read_on_context_names_are_listed() {
        let analysis = super::template(
            "{{ draft.content }}{{ review['parsed'] }}{% for x in xs %}{{ x.y }}{% endfor %}",
        )
        .unwrap();
        let expected: BTreeSet<(String, String)> = [("draft", "content"), ("review", "parsed")]
            .into_iter()
            .map(|(name, field)| (name.to_string(), field.to_string()))
            .collect();
        assert_eq!(analysis.attributes, expected);
    }

    #[test]
    fn expressions_are_checked_like_templates() {
        let analysis = super::expression("review.parsed.verdict == 'ok' and n is defined").unwrap();
        assert!(analysis.problems.is_empty());
        assert_eq!(analysis.required, BTreeSet::from(["review".to_string()]));
        assert_eq!(analysis.optional, BTreeSet::from(["n".to_string()]));
        let analysis = super::expression("range(3) | nosuch").unwrap();
        assert_eq!(analysis.problems.len(), 1);
        assert!(analysis.required.is_empty());
    }
}
