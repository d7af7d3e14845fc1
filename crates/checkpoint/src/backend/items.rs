//! [`ItemStore`]: the long-term key/value store. Namespaces are stored as one escaped text
//! key (see [`crate::json::encode_namespace`]) so that prefix search is a range scan.

use super::db::{Arg, DbErr, DbResult, Row, Sql, retry};
use super::{Select, SqlStore, Where};
use crate::ids::{self, plus_minutes};
use crate::json::{decode_namespace, encode_namespace, namespace_range};
use crate::types::*;
use crate::{ItemStore, Result};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashSet;

macro_rules! item_cols {
    () => {
        "namespace, key, value, created_at, updated_at, ttl_minutes, expires_at"
    };
}

fn item_from_row(r: &Row) -> DbResult<Item> {
    let encoded = r.text("namespace")?;
    Ok(Item {
        namespace: decode_namespace(&encoded)
            .ok_or_else(|| DbErr::corrupt(format!("store namespace {encoded:?}")))?,
        key: r.text("key")?,
        value: r.map("value")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
        expires_at: super::stored_expiry(r, "expires_at", &encoded),
    })
}

fn validate_namespace(namespace: &[String]) -> DbResult<()> {
    if namespace.is_empty() {
        return Err(DbErr::invalid("Namespace cannot be empty."));
    }
    if namespace.iter().any(String::is_empty) {
        return Err(DbErr::invalid("Namespace labels cannot be empty strings."));
    }
    Ok(())
}

fn validate_ttl(ttl: Option<f64>) -> DbResult<()> {
    match ttl {
        Some(t) if !valid_ttl_minutes(t) => Err(DbErr::invalid(format!(
            "ttl must be a positive number of minutes, at most {MAX_TTL_MINUTES} (100 years), got {t}"
        ))),
        _ => Ok(()),
    }
}

/// Pushes back the expiry of items with a TTL (those not expired yet). A TTL out of range
/// (stored before TTLs were bounded) is left alone rather than overflowing the expiry.
const REFRESH_TTL: &str = concat!(
    "UPDATE store_items SET expires_at = $3 + CAST(ttl_minutes * 60000000 AS BIGINT) ",
    "WHERE namespace = $1 AND key = $2 AND ttl_minutes > 0 AND ttl_minutes <= ",
    super::max_ttl_minutes!(),
    " AND (expires_at IS NULL OR expires_at > $3)"
);

impl SqlStore {
    async fn put_item_once(&self, item: &PutItem) -> DbResult<()> {
        validate_namespace(&item.namespace)?;
        validate_ttl(item.ttl_minutes)?;
        let now = ids::now();
        self.db
            .write_exec(
                Sql::new(concat!(
                    "INSERT INTO store_items (",
                    item_cols!(),
                    ") VALUES ($1, $2, $3, $4, $4, $5, $6) ",
                    "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, ",
                    "created_at = CASE WHEN store_items.expires_at IS NOT NULL ",
                    "AND store_items.expires_at <= excluded.updated_at ",
                    "THEN excluded.created_at ELSE store_items.created_at END, ",
                    "updated_at = excluded.updated_at, ttl_minutes = excluded.ttl_minutes, ",
                    "expires_at = excluded.expires_at"
                ))
                .bind(encode_namespace(&item.namespace))
                .bind(item.key.as_str())
                .arg(Arg::json_map(&item.value))
                .arg(Arg::ts(now))
                .bind(item.ttl_minutes)
                .arg(Arg::opt_ts(item.ttl_minutes.map(|m| plus_minutes(now, m)))),
            )
            .await?;
        Ok(())
    }

    async fn get_item_once(
        &self,
        namespace: &[String],
        key: &str,
        refresh_ttl: bool,
    ) -> DbResult<Option<Item>> {
        let ns = encode_namespace(namespace);
        let now = ids::now();
        let select = Sql::new(concat!(
            "SELECT ",
            item_cols!(),
            " FROM store_items WHERE namespace = $1 AND key = $2 ",
            "AND (expires_at IS NULL OR expires_at > $3)"
        ))
        .bind(ns.as_str())
        .bind(key)
        .arg(Arg::ts(now));
        let row = if refresh_ttl {
            let mut tx = self.db.begin().await?;
            tx.exec(
                Sql::new(REFRESH_TTL)
                    .bind(ns.as_str())
                    .bind(key)
                    .arg(Arg::ts(now)),
            )
            .await?;
            let row = tx.opt(select).await?;
            tx.commit().await?;
            row
        } else {
            self.db.read_opt(select).await?
        };
        row.as_ref().map(item_from_row).transpose()
    }

    async fn delete_item_once(&self, namespace: &[String], key: &str) -> DbResult<()> {
        self.db
            .write_exec(
                Sql::new("DELETE FROM store_items WHERE namespace = $1 AND key = $2")
                    .bind(encode_namespace(namespace))
                    .bind(key),
            )
            .await?;
        Ok(())
    }

    async fn search_items_once(&self, query: &ItemQuery) -> DbResult<Vec<Item>> {
        let now = ids::now();
        let mut w = Where::new(self.dialect());
        let (lower, upper) = namespace_range(&query.namespace_prefix);
        if let Some(upper) = upper {
            let lo = w.binds.push(lower);
            let hi = w.binds.push(upper);
            w.clause(format!("namespace >= {lo} AND namespace < {hi}"));
        }
        let p = w.binds.push(Arg::ts(now));
        w.clause(format!("(expires_at IS NULL OR expires_at > {p})"));
        if let Some(filter) = &query.filter {
            w.fields_equal("value", filter);
        }
        let page = self
            .search_page(
                Select {
                    cols: item_cols!(),
                    from: "store_items",
                    order: "updated_at DESC, namespace, key",
                },
                w,
                query.limit,
                query.offset,
                item_from_row,
            )
            .await?;
        let mut items = page.items;
        if query.refresh_ttl && !items.is_empty() {
            let mut tx = self.db.begin().await?;
            for item in &items {
                tx.exec(
                    Sql::new(REFRESH_TTL)
                        .bind(encode_namespace(&item.namespace))
                        .bind(item.key.as_str())
                        .arg(Arg::ts(now)),
                )
                .await?;
            }
            // Read the new expiry times back.
            let mut refreshed = Vec::with_capacity(items.len());
            for item in &items {
                let row = tx
                    .opt(
                        Sql::new(concat!(
                            "SELECT ",
                            item_cols!(),
                            " FROM store_items WHERE namespace = $1 AND key = $2"
                        ))
                        .bind(encode_namespace(&item.namespace))
                        .bind(item.key.as_str()),
                    )
                    .await?;
                if let Some(row) = row {
                    refreshed.push(item_from_row(&row)?);
                }
            }
            tx.commit().await?;
            items = refreshed;
        }
        Ok(items)
    }

    async fn list_namespaces_once(&self, query: &NamespaceQuery) -> DbResult<Vec<Vec<String>>> {
        let now = ids::now();
        let mut args = vec![Arg::ts(now)];
        let mut text = "SELECT DISTINCT namespace FROM store_items \
                        WHERE (expires_at IS NULL OR expires_at > $1)"
            .to_string();
        if let Some(prefix) = &query.prefix {
            let (lower, upper) = namespace_range(prefix);
            if let Some(upper) = upper {
                args.push(Arg::from(lower));
                args.push(Arg::from(upper));
                text.push_str(" AND namespace >= $2 AND namespace < $3");
            }
        }
        text.push_str(" ORDER BY namespace");
        let rows = self.db.read_all(Sql::dynamic(text, args)).await?;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for row in rows {
            let encoded = row.text("namespace")?;
            let mut ns = decode_namespace(&encoded)
                .ok_or_else(|| DbErr::corrupt(format!("store namespace {encoded:?}")))?;
            if let Some(suffix) = &query.suffix
                && !ns.ends_with(suffix)
            {
                continue;
            }
            if let Some(depth) = query.max_depth {
                ns.truncate(depth);
            }
            if seen.insert(ns.clone()) {
                out.push(ns);
            }
        }
        let start = usize::try_from(query.offset)
            .unwrap_or(usize::MAX)
            .min(out.len());
        let mut out = out.split_off(start);
        if query.limit > 0 {
            out.truncate(usize::try_from(query.limit).unwrap_or(usize::MAX));
        }
        Ok(out)
    }

    async fn sweep_expired_items_once(&self, now: DateTime<Utc>) -> DbResult<u64> {
        self.db
            .write_exec(
                Sql::new(
                    "DELETE FROM store_items WHERE expires_at IS NOT NULL AND expires_at <= $1",
                )
                .arg(Arg::ts(now)),
            )
            .await
    }
}

#[async_trait]
impl ItemStore for SqlStore {
    async fn put_item(&self, item: PutItem) -> Result<()> {
        retry!(self.put_item_once(&item))
    }

    async fn get_item(
        &self,
        namespace: &[String],
        key: &str,
        refresh_ttl: bool,
    ) -> Result<Option<Item>> {
        retry!(self.get_item_once(namespace, key, refresh_ttl))
    }

    async fn delete_item(&self, namespace: &[String], key: &str) -> Result<()> {
        retry!(self.delete_item_once(namespace, key))
    }

    async fn search_items(&self, query: &ItemQuery) -> Result<Vec<Item>> {
        retry!(self.search_items_once(query))
    }

    async fn list_namespaces(&self, query: &NamespaceQuery) -> Result<Vec<Vec<String>>> {
        retry!(self.list_namespaces_once(query))
    }

    async fn sweep_expired_items(&self, now: DateTime<Utc>) -> Result<u64> {
        retry!(self.sweep_expired_items_once(now))
    }
}
