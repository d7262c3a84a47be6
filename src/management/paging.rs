//! Pagination of list endpoints, as RabbitMQ 3.10's API does it.
//!
//! A GET of a list with `page` in its query (`/api/queues?page=1&page_size=100
//! &name=foo&use_regex=true`) answers an object instead of the bare list:
//! `items` holds one page of the (name-filtered) list, with `page`,
//! `page_size`, `page_count`, `item_count`, `filtered_count` and
//! `total_count`. Clients such as amqpstorm's management API page through
//! queues, exchanges and connections this way. `sort` (a field, dotted for a
//! nested one: `message_stats.publish_details.rate`) and `sort_reverse=true`
//! order the list before it is cut, with or without `page`, as RabbitMQ's
//! web UI asks for its sortable columns. The lists are built by their own
//! handlers; this layer only sorts, filters and cuts the finished list, so
//! every list endpoint pages the same way.

use super::ApiError;
use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;

/// RabbitMQ's largest page.
const PAGE_SIZE_MAX: usize = 500;

/// Largest list body this layer reads back.
const BODY_MAX_BYTES: usize = 256 << 20;

/// The paging parameters of a request.
struct Paging {
    /// `None`: sort only, answer the bare list.
    page: Option<usize>,
    page_size: usize,
    name: Option<String>,
    use_regex: bool,
    /// The field to order by, split at its dots.
    sort: Option<Vec<String>>,
    sort_reverse: bool,
}

fn parse(query: &str) -> Result<Option<Paging>, ApiError> {
    let params: HashMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    let sort = params
        .get("sort")
        .filter(|s| !s.is_empty())
        .map(|s| s.split('.').map(str::to_string).collect::<Vec<_>>());
    let sort_reverse = params.get("sort_reverse").is_some_and(|v| v == "true");
    let bad = |what: &str| ApiError::BadRequest(format!("{what} must be a positive integer"));
    let page = match params.get("page") {
        None if sort.is_none() => return Ok(None),
        None => None,
        Some(page) => Some(
            page.parse()
                .ok()
                .filter(|p: &usize| *p > 0)
                .ok_or_else(|| bad("page"))?,
        ),
    };
    let page_size = match params.get("page_size") {
        Some(s) => s
            .parse()
            .ok()
            .filter(|n| (1..=PAGE_SIZE_MAX).contains(n))
            .ok_or_else(|| bad("page_size (at most 500)"))?,
        None => 100,
    };
    Ok(Some(Paging {
        page,
        page_size,
        name: params.get("name").filter(|n| !n.is_empty()).cloned(),
        use_regex: params.get("use_regex").is_some_and(|v| v == "true"),
        sort,
        sort_reverse,
    }))
}

/// Percent-decoding of one query component (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The middleware: page GET lists when asked to.
pub async fn paginate(req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    let paging = match parse(req.uri().query().unwrap_or("")) {
        Ok(Some(p)) => p,
        Ok(None) => return next.run(req).await,
        Err(e) => return e.into_response(),
    };
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = to_bytes(body, BODY_MAX_BYTES).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(Value::Array(all)) = serde_json::from_slice::<Value>(&bytes) else {
        // Not a list: answer as it was.
        return Response::from_parts(parts, Body::from(bytes));
    };
    let all = sorted(all, &paging);
    if paging.page.is_none() {
        let body = Value::Array(all).to_string();
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    match page_of(all, &paging) {
        Ok(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The list ordered by `p.sort`: numbers by value, strings by their text, an
/// item without the field first (RabbitMQ's order for a missing rate).
fn sorted(mut all: Vec<Value>, p: &Paging) -> Vec<Value> {
    let Some(path) = &p.sort else {
        return all;
    };
    let key = |item: &Value| -> Value {
        path.iter()
            .try_fold(item, |v, k| v.get(k))
            .cloned()
            .unwrap_or(Value::Null)
    };
    all.sort_by(|a, b| {
        let (a, b) = (key(a), key(b));
        let ord = match (&a, &b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.total_cmp(&y)
            }
            (Value::String(x), Value::String(y)) => x.cmp(y),
            (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
            (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
            (Value::Null, _) => std::cmp::Ordering::Less,
            (_, Value::Null) => std::cmp::Ordering::Greater,
            (x, y) => x.to_string().cmp(&y.to_string()),
        };
        if p.sort_reverse { ord.reverse() } else { ord }
    });
    all
}

fn page_of(all: Vec<Value>, p: &Paging) -> Result<Value, ApiError> {
    let page = p.page.unwrap_or(1);
    let total = all.len();
    let filtered: Vec<Value> = match &p.name {
        None => all,
        Some(n) => {
            let re = if p.use_regex {
                Some(
                    regex::Regex::new(n)
                        .map_err(|e| ApiError::BadRequest(format!("invalid regex {n}: {e}")))?,
                )
            } else {
                None
            };
            all.into_iter()
                .filter(|item| {
                    let name = item["name"].as_str().unwrap_or("");
                    match &re {
                        Some(re) => re.is_match(name),
                        None => name.contains(n.as_str()),
                    }
                })
                .collect()
        }
    };
    let filtered_count = filtered.len();
    let page_count = filtered_count.div_ceil(p.page_size).max(1);
    if page > page_count {
        return Err(ApiError::BadRequest(format!(
            "page {page} is out of range (page_count {page_count})"
        )));
    }
    let items: Vec<Value> = filtered
        .into_iter()
        .skip((page - 1) * p.page_size)
        .take(p.page_size)
        .collect();
    Ok(json!({
        "filtered_count": filtered_count,
        "item_count": items.len(),
        "items": items,
        "page": page,
        "page_count": page_count,
        "page_size": p.page_size,
        "total_count": total,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[Value]) -> Vec<&str> {
        v.iter().filter_map(|i| i["name"].as_str()).collect()
    }

    #[test]
    fn sorts_by_a_nested_field_and_reverses() {
        let list = vec![
            json!({"name": "b", "messages": 5, "message_stats": {"publish": 1}}),
            json!({"name": "a", "messages": 10}),
            json!({"name": "c", "messages": 2, "message_stats": {"publish": 9}}),
        ];
        let p = parse("sort=messages&sort_reverse=true")
            .expect("ok")
            .expect("some");
        assert!(p.page.is_none());
        assert_eq!(names(&sorted(list.clone(), &p)), ["a", "b", "c"]);
        let p = parse("sort=message_stats.publish&page=1&page_size=2")
            .expect("ok")
            .expect("some");
        let page = page_of(sorted(list.clone(), &p), &p).expect("page");
        let items = page["items"].as_array().expect("items");
        assert_eq!(names(items), ["a", "b"]);
        assert_eq!(page["page_count"], 2);
        let p = parse("sort=name").expect("ok").expect("some");
        assert_eq!(names(&sorted(list, &p)), ["a", "b", "c"]);
        assert!(parse("name=x").expect("ok").is_none());
    }
}
