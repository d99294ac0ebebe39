//! A renderer for the subset of Helm's Go templates that `deploy/helm/meshflow` uses, for
//! machines without `helm` (none of this project's registries ships it). Not Helm: it knows
//! `{{ PIPELINE }}`, `{{- … -}}` whitespace trimming, `if`/`else`/`end`, the values
//! `.Values.…`, `.Release.Name`, `.Release.Namespace`, `.Chart.…`, string and integer
//! literals, and the functions `default`, `not`, `join`, `quote`, `toYaml`, `nindent`,
//! `indent`. Anything else in a template is an error naming it, and so is a value the
//! values file does not define (Helm would print nothing): a chart edit outside the subset
//! fails the test instead of rendering something else than Helm would.

use serde_json::Value;

pub struct Context {
    pub values: Value,
    pub chart: Value,
    pub release_name: String,
    pub release_namespace: String,
}

enum Node {
    Text(String),
    Print(String),
    If {
        condition: String,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// Renders one template file.
pub fn render(template: &str, ctx: &Context) -> Result<String, String> {
    let tokens = tokenize(template)?;
    let mut pos = 0;
    let (nodes, stop) = parse(&tokens, &mut pos)?;
    if let Some(stop) = stop {
        return Err(format!("unexpected {{{{ {stop} }}}}"));
    }
    let mut out = String::new();
    emit(&nodes, ctx, &mut out)?;
    Ok(out)
}

enum Token {
    Text(String),
    Action(String),
}

fn tokenize(template: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut rest = template;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_string();
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| format!("an unclosed {{{{ in: {after}"))?;
        let mut action = &after[..close];
        if trim_next {
            text = text.trim_start().to_string();
        }
        if let Some(a) = action.strip_prefix('-') {
            text = text.trim_end().to_string();
            action = a;
        }
        trim_next = false;
        if let Some(a) = action.strip_suffix('-') {
            trim_next = true;
            action = a;
        }
        tokens.push(Token::Text(text));
        tokens.push(Token::Action(action.trim().to_string()));
        rest = &after[close + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    tokens.push(Token::Text(text.to_string()));
    Ok(tokens)
}

/// Parses nodes until `else`/`end` (returned) or the end of the tokens.
fn parse(tokens: &[Token], pos: &mut usize) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while *pos < tokens.len() {
        let token = &tokens[*pos];
        *pos += 1;
        match token {
            Token::Text(t) => nodes.push(Node::Text(t.clone())),
            Token::Action(a) if a == "end" || a == "else" => return Ok((nodes, Some(a.clone()))),
            Token::Action(a) => {
                if let Some(condition) = a.strip_prefix("if ") {
                    let (then, stop) = parse(tokens, pos)?;
                    let otherwise = match stop.as_deref() {
                        Some("else") => match parse(tokens, pos)? {
                            (o, Some(end)) if end == "end" => o,
                            _ => return Err(format!("if {condition}: else without end")),
                        },
                        Some("end") => Vec::new(),
                        _ => return Err(format!("if {condition}: no end")),
                    };
                    nodes.push(Node::If {
                        condition: condition.to_string(),
                        then,
                        otherwise,
                    });
                } else {
                    let word = a.split_whitespace().next().unwrap_or("");
                    if ["range", "with", "define", "template", "include", "block"].contains(&word)
                        || a.starts_with("/*")
                        || a.contains(":=")
                    {
                        return Err(format!("unsupported template action {{{{ {a} }}}}"));
                    }
                    nodes.push(Node::Print(a.clone()));
                }
            }
        }
    }
    Ok((nodes, None))
}

fn emit(nodes: &[Node], ctx: &Context, out: &mut String) -> Result<(), String> {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Print(p) => out.push_str(&to_text(&pipeline(p, ctx)?)),
            Node::If {
                condition,
                then,
                otherwise,
            } => {
                let branch = if truthy(&pipeline(condition, ctx)?) {
                    then
                } else {
                    otherwise
                };
                emit(branch, ctx, out)?;
            }
        }
    }
    Ok(())
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn to_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Splits on whitespace and `|`, keeping quoted strings whole.
fn words(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '|' {
            chars.next();
            out.push("|".to_string());
        } else if c == '"' {
            chars.next();
            let mut s = String::from("\"");
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => s.push(chars.next().ok_or("a dangling escape")?),
                    Some(c) => s.push(c),
                    None => return Err(format!("an unclosed string in {text}")),
                }
            }
            out.push(s);
        } else {
            let mut w = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '|' {
                    break;
                }
                w.push(c);
                chars.next();
            }
            out.push(w);
        }
    }
    Ok(out)
}

fn pipeline(text: &str, ctx: &Context) -> Result<Value, String> {
    let words = words(text)?;
    let mut piped: Option<Value> = None;
    for command in words.split(|w| w == "|") {
        let Some((head, args)) = command.split_first() else {
            return Err(format!("an empty command in {text}"));
        };
        let mut values: Vec<Value> = args
            .iter()
            .map(|a| operand(a, ctx))
            .collect::<Result<_, _>>()?;
        if let Some(p) = piped.take() {
            values.push(p);
        }
        piped = Some(if is_function(head) {
            call(head, values, text)?
        } else if values.is_empty() {
            operand(head, ctx)?
        } else {
            return Err(format!("{head} is not a function, in {text}"));
        });
    }
    piped.ok_or_else(|| format!("an empty pipeline: {text}"))
}

fn is_function(word: &str) -> bool {
    [
        "default", "not", "join", "quote", "toYaml", "nindent", "indent",
    ]
    .contains(&word)
}

fn operand(word: &str, ctx: &Context) -> Result<Value, String> {
    if let Some(s) = word.strip_prefix('"') {
        return Ok(Value::from(s));
    }
    if let Ok(n) = word.parse::<i64>() {
        return Ok(Value::from(n));
    }
    let path: Vec<&str> = word.split('.').collect();
    let (root, rest): (Value, &[&str]) = match path.as_slice() {
        ["", "Values", rest @ ..] => (ctx.values.clone(), rest),
        ["", "Release", "Name"] => return Ok(Value::from(ctx.release_name.clone())),
        ["", "Release", "Namespace"] => return Ok(Value::from(ctx.release_namespace.clone())),
        ["", "Chart", field] => {
            // Helm's `.Chart.AppVersion` is Chart.yaml's `appVersion`.
            let mut key = field.to_string();
            if let Some(first) = key.get(..1) {
                key = first.to_lowercase() + &key[1..];
            }
            return ctx
                .chart
                .get(&key)
                .cloned()
                .ok_or_else(|| format!("Chart.yaml has no {key}"));
        }
        _ => return Err(format!("unsupported operand {word}")),
    };
    let mut v = &root;
    for p in rest {
        v = v
            .get(*p)
            .ok_or_else(|| format!("{word}: the values define no {p}"))?;
    }
    Ok(v.clone())
}

fn call(name: &str, args: Vec<Value>, text: &str) -> Result<Value, String> {
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("{name} takes {n} arguments, in {text}"))
        }
    };
    let count = |v: &Value| {
        v.as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("{name} needs a count, in {text}"))
    };
    Ok(match name {
        "default" => {
            arity(2)?;
            if truthy(&args[1]) {
                args[1].clone()
            } else {
                args[0].clone()
            }
        }
        "not" => {
            arity(1)?;
            Value::from(!truthy(&args[0]))
        }
        "join" => {
            arity(2)?;
            let list = args[1]
                .as_array()
                .ok_or_else(|| format!("join needs a list, in {text}"))?;
            let parts: Vec<String> = list.iter().map(to_text).collect();
            Value::from(parts.join(&to_text(&args[0])))
        }
        "quote" => {
            arity(1)?;
            Value::from(serde_json::to_string(&to_text(&args[0])).map_err(|e| e.to_string())?)
        }
        "toYaml" => {
            arity(1)?;
            let yaml = serde_yaml_ng::to_string(&args[0]).map_err(|e| e.to_string())?;
            Value::from(yaml.trim_end().to_string())
        }
        "nindent" | "indent" => {
            arity(2)?;
            let pad = " ".repeat(count(&args[0])?);
            let body: Vec<String> = to_text(&args[1])
                .lines()
                .map(|l| format!("{pad}{l}"))
                .collect();
            let lead = if name == "nindent" { "\n" } else { "" };
            Value::from(format!("{lead}{}", body.join("\n")))
        }
        _ => return Err(format!("unsupported function {name}")),
    })
}

#[test]
fn renders_the_subset_and_refuses_the_rest() {
    let ctx = Context {
        values: serde_json::json!({"a": {"b": "x"}, "list": ["p", "q"], "empty": "", "res": {"cpu": "1"}}),
        chart: serde_json::json!({"appVersion": "9"}),
        release_name: "r".into(),
        release_namespace: "ns".into(),
    };
    let t = "k: {{ .Values.a.b }}\n{{- if .Values.empty }}\nno\n{{- else }}\nv: {{ .Values.empty | default .Chart.AppVersion }}\n{{- end }}\nj: {{ join \",\" .Values.list }} {{ quote .Release.Name }}\nr:\n  {{- toYaml .Values.res | nindent 2 }}\n";
    assert_eq!(
        render(t, &ctx).expect("renders"),
        "k: x\nv: 9\nj: p,q \"r\"\nr:\n  cpu: '1'\n"
    );
    assert!(render("{{ range .Values.list }}{{ end }}", &ctx)
        .unwrap_err()
        .contains("unsupported"));
    assert!(render("{{ .Values.nope }}", &ctx)
        .unwrap_err()
        .contains("no nope"));
}
