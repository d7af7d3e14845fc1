//! [`AssistantStore`]: assistants and their versions. Every change writes a new version
//! row and points the assistant at it.

use super::db::{Arg, DbErr, DbResult, Row, Sql, Tx, retry};
use super::{Select, SqlStore, Where, dir};
use crate::ids::{self, new_uuid4};
use crate::json::merge_shallow;
use crate::types::*;
use crate::{AssistantStore, Result};
use async_trait::async_trait;
use serde_json::{Map, Value};

macro_rules! assistant_cols {
    () => {
        "assistant_id, graph_id, config, context, metadata, name, description, version, \
         created_at, updated_at"
    };
}

macro_rules! version_cols {
    () => {
        "assistant_id, version, graph_id, config, context, metadata, name, description, created_at"
    };
}

fn assistant_from_row(r: &Row) -> DbResult<Assistant> {
    Ok(Assistant {
        assistant_id: r.text("assistant_id")?,
        graph_id: r.text("graph_id")?,
        config: r.map("config")?,
        context: r.map("context")?,
        metadata: r.map("metadata")?,
        name: r.text("name")?,
        description: r.opt_text("description")?,
        version: r.int("version")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

fn version_from_row(r: &Row) -> DbResult<AssistantVersion> {
    Ok(AssistantVersion {
        assistant_id: r.text("assistant_id")?,
        graph_id: r.text("graph_id")?,
        config: r.map("config")?,
        context: r.map("context")?,
        metadata: r.map("metadata")?,
        name: r.text("name")?,
        description: r.opt_text("description")?,
        version: r.int("version")?,
        created_at: r.ts("created_at")?,
    })
}

fn not_found(assistant_id: &str) -> DbErr {
    DbErr::not_found(format!("Assistant {assistant_id} not found"))
}

/// The fields a version carries.
struct Fields<'a> {
    graph_id: &'a str,
    config: &'a Map<String, Value>,
    context: &'a Map<String, Value>,
    metadata: &'a Map<String, Value>,
    name: &'a str,
    description: Option<&'a str>,
}

async fn insert_version(
    tx: &mut Tx,
    assistant_id: &str,
    version: i64,
    f: &Fields<'_>,
    now: chrono::DateTime<chrono::Utc>,
) -> DbResult<()> {
    tx.exec(
        Sql::new(concat!(
            "INSERT INTO assistant_versions (",
            version_cols!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(assistant_id)
        .bind(version)
        .bind(f.graph_id)
        .arg(Arg::json_map(f.config))
        .arg(Arg::json_map(f.context))
        .arg(Arg::json_map(f.metadata))
        .bind(f.name)
        .bind(f.description)
        .arg(Arg::ts(now)),
    )
    .await?;
    Ok(())
}

/// Escapes `LIKE` wildcards (`\` is the escape character).
fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn assistant_filter(store: &SqlStore, filter: &AssistantFilter) -> Where {
    let mut w = Where::new(store.dialect());
    if let Some(m) = &filter.metadata {
        w.contains("metadata", m);
    }
    if let Some(g) = &filter.graph_id {
        w.eq("graph_id", g.as_str());
    }
    if let Some(name) = &filter.name {
        // Case-insensitive substring, as the reference server matches names.
        let p = w
            .binds
            .push(format!("%{}%", like_escape(&name.to_lowercase())));
        w.clause(format!("LOWER(name) LIKE {p} ESCAPE '\\'"));
    }
    w
}

impl SqlStore {
    async fn create_assistant_once(&self, a: &NewAssistant, id: &str) -> DbResult<Assistant> {
        let now = ids::now();
        let mut tx = self.db.begin().await?;
        let row = tx
            .opt(
                Sql::new(concat!(
                    "INSERT INTO assistants (",
                    assistant_cols!(),
                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8) ",
                    "ON CONFLICT (assistant_id) DO NOTHING RETURNING ",
                    assistant_cols!()
                ))
                .bind(id)
                .bind(a.graph_id.as_str())
                .arg(Arg::json_map(&a.config))
                .arg(Arg::json_map(&a.context))
                .arg(Arg::json_map(&a.metadata))
                .bind(a.name.as_str())
                .bind(a.description.clone())
                .arg(Arg::ts(now)),
            )
            .await?;
        let assistant = match row {
            Some(row) => {
                let fields = Fields {
                    graph_id: &a.graph_id,
                    config: &a.config,
                    context: &a.context,
                    metadata: &a.metadata,
                    name: &a.name,
                    description: a.description.as_deref(),
                };
                insert_version(&mut tx, id, 1, &fields, now).await?;
                assistant_from_row(&row)?
            }
            None => match a.if_exists {
                IfExists::Raise => {
                    return Err(DbErr::conflict(format!("Assistant {id} already exists")));
                }
                IfExists::DoNothing => tx
                    .opt(
                        Sql::new(concat!(
                            "SELECT ",
                            assistant_cols!(),
                            " FROM assistants WHERE assistant_id = $1"
                        ))
                        .bind(id),
                    )
                    .await?
                    .as_ref()
                    .map(assistant_from_row)
                    .transpose()?
                    .ok_or_else(|| not_found(id))?,
            },
        };
        tx.commit().await?;
        Ok(assistant)
    }

    async fn get_assistant_once(&self, assistant_id: &str) -> DbResult<Option<Assistant>> {
        self.db
            .read_opt(
                Sql::new(concat!(
                    "SELECT ",
                    assistant_cols!(),
                    " FROM assistants WHERE assistant_id = $1"
                ))
                .bind(assistant_id),
            )
            .await?
            .as_ref()
            .map(assistant_from_row)
            .transpose()
    }

    async fn update_assistant_once(
        &self,
        assistant_id: &str,
        patch: &AssistantPatch,
    ) -> DbResult<Assistant> {
        let mut tx = self.db.begin().await?;
        let select = self.dialect().pick(
            concat!(
                "SELECT ",
                assistant_cols!(),
                " FROM assistants WHERE assistant_id = $1"
            ),
            concat!(
                "SELECT ",
                assistant_cols!(),
                " FROM assistants WHERE assistant_id = $1 FOR UPDATE"
            ),
        );
        let current = tx
            .opt(Sql::new(select).bind(assistant_id))
            .await?
            .as_ref()
            .map(assistant_from_row)
            .transpose()?
            .ok_or_else(|| not_found(assistant_id))?;
        let latest = tx
            .opt(
                Sql::new(
                    "SELECT MAX(version) AS v FROM assistant_versions WHERE assistant_id = $1",
                )
                .bind(assistant_id),
            )
            .await?
            .map(|r| r.opt_int("v"))
            .transpose()?
            .flatten()
            .unwrap_or(current.version);
        let version = latest.max(current.version) + 1;
        let mut metadata = current.metadata.clone();
        if let Some(m) = &patch.metadata {
            merge_shallow(&mut metadata, m);
        }
        let description = match &patch.description {
            Some(d) => d.as_deref(),
            None => current.description.as_deref(),
        };
        let fields = Fields {
            graph_id: patch.graph_id.as_deref().unwrap_or(&current.graph_id),
            config: patch.config.as_ref().unwrap_or(&current.config),
            context: patch.context.as_ref().unwrap_or(&current.context),
            metadata: &metadata,
            name: patch.name.as_deref().unwrap_or(&current.name),
            description,
        };
        let now = ids::now();
        insert_version(&mut tx, assistant_id, version, &fields, now).await?;
        let row = tx
            .opt(
                Sql::new(concat!(
                    "UPDATE assistants SET graph_id = $2, config = $3, context = $4, ",
                    "metadata = $5, name = $6, description = $7, version = $8, updated_at = $9 ",
                    "WHERE assistant_id = $1 RETURNING ",
                    assistant_cols!()
                ))
                .bind(assistant_id)
                .bind(fields.graph_id)
                .arg(Arg::json_map(fields.config))
                .arg(Arg::json_map(fields.context))
                .arg(Arg::json_map(fields.metadata))
                .bind(fields.name)
                .bind(fields.description)
                .bind(version)
                .arg(Arg::ts(now)),
            )
            .await?
            .ok_or_else(|| not_found(assistant_id))?;
        let assistant = assistant_from_row(&row)?;
        tx.commit().await?;
        Ok(assistant)
    }

    async fn delete_assistant_once(&self, assistant_id: &str) -> DbResult<bool> {
        let mut tx = self.db.begin().await?;
        tx.exec(
            Sql::new("DELETE FROM assistant_versions WHERE assistant_id = $1").bind(assistant_id),
        )
        .await?;
        let n = tx
            .exec(Sql::new("DELETE FROM assistants WHERE assistant_id = $1").bind(assistant_id))
            .await?;
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn search_assistants_once(&self, query: &AssistantQuery) -> DbResult<Page<Assistant>> {
        let col = match query.sort_by {
            AssistantSort::AssistantId => "assistant_id",
            AssistantSort::GraphId => "graph_id",
            AssistantSort::Name => "name",
            AssistantSort::CreatedAt => "created_at",
            AssistantSort::UpdatedAt => "updated_at",
        };
        let d = dir(query.sort_order);
        let order = format!("{col} {d}, assistant_id {d}");
        self.search_page(
            Select {
                cols: assistant_cols!(),
                from: "assistants",
                order: &order,
            },
            assistant_filter(self, &query.filter),
            query.limit,
            query.offset,
            assistant_from_row,
        )
        .await
    }

    async fn assistant_versions_once(
        &self,
        assistant_id: &str,
        metadata: Option<&Map<String, Value>>,
        limit: u64,
        offset: u64,
    ) -> DbResult<Vec<AssistantVersion>> {
        let mut w = Where::new(self.dialect());
        w.eq("assistant_id", assistant_id);
        if let Some(m) = metadata {
            w.contains("metadata", m);
        }
        let page = self
            .search_page(
                Select {
                    cols: version_cols!(),
                    from: "assistant_versions",
                    order: "version DESC",
                },
                w,
                limit,
                offset,
                version_from_row,
            )
            .await?;
        Ok(page.items)
    }

    async fn set_latest_version_once(
        &self,
        assistant_id: &str,
        version: i64,
    ) -> DbResult<Assistant> {
        let mut tx = self.db.begin().await?;
        let v = tx
            .opt(
                Sql::new(concat!(
                    "SELECT ",
                    version_cols!(),
                    " FROM assistant_versions WHERE assistant_id = $1 AND version = $2"
                ))
                .bind(assistant_id)
                .bind(version),
            )
            .await?
            .as_ref()
            .map(version_from_row)
            .transpose()?
            .ok_or_else(|| {
                DbErr::not_found(format!("Assistant {assistant_id} has no version {version}"))
            })?;
        let row = tx
            .opt(
                Sql::new(concat!(
                    "UPDATE assistants SET graph_id = $2, config = $3, context = $4, ",
                    "metadata = $5, name = $6, description = $7, version = $8, updated_at = $9 ",
                    "WHERE assistant_id = $1 RETURNING ",
                    assistant_cols!()
                ))
                .bind(assistant_id)
                .bind(v.graph_id.as_str())
                .arg(Arg::json_map(&v.config))
                .arg(Arg::json_map(&v.context))
                .arg(Arg::json_map(&v.metadata))
                .bind(v.name.as_str())
                .bind(v.description.clone())
                .bind(version)
                .arg(Arg::ts(ids::now())),
            )
            .await?
            .ok_or_else(|| not_found(assistant_id))?;
        let assistant = assistant_from_row(&row)?;
        tx.commit().await?;
        Ok(assistant)
    }
}

#[async_trait]
impl AssistantStore for SqlStore {
    async fn upsert_system_assistant(&self, assistant: NewAssistant) -> Result<Assistant> {
        let id = assistant.assistant_id.clone().unwrap_or_else(new_uuid4);
        let assistant = NewAssistant {
            if_exists: IfExists::DoNothing,
            ..assistant
        };
        retry!(self.create_assistant_once(&assistant, &id))
    }

    async fn create_assistant(&self, assistant: NewAssistant) -> Result<Assistant> {
        let id = assistant.assistant_id.clone().unwrap_or_else(new_uuid4);
        retry!(self.create_assistant_once(&assistant, &id))
    }

    async fn get_assistant(&self, assistant_id: &str) -> Result<Option<Assistant>> {
        retry!(self.get_assistant_once(assistant_id))
    }

    async fn update_assistant(
        &self,
        assistant_id: &str,
        patch: AssistantPatch,
    ) -> Result<Assistant> {
        retry!(self.update_assistant_once(assistant_id, &patch))
    }

    async fn delete_assistant(&self, assistant_id: &str) -> Result<bool> {
        retry!(self.delete_assistant_once(assistant_id))
    }

    async fn search_assistants(&self, query: &AssistantQuery) -> Result<Page<Assistant>> {
        retry!(self.search_assistants_once(query))
    }

    async fn count_assistants(&self, filter: &AssistantFilter) -> Result<u64> {
        retry!(self.count_matching(
            assistant_cols!(),
            "assistants",
            assistant_filter(self, filter)
        ))
    }

    async fn assistant_versions(
        &self,
        assistant_id: &str,
        metadata: Option<&Map<String, Value>>,
        limit: u64,
        offset: u64,
    ) -> Result<Vec<AssistantVersion>> {
        retry!(self.assistant_versions_once(assistant_id, metadata, limit, offset))
    }

    async fn set_latest_version(&self, assistant_id: &str, version: i64) -> Result<Assistant> {
        retry!(self.set_latest_version_once(assistant_id, version))
    }
}
