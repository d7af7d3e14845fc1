//! [`UserStore`]: accounts and the API keys that act for them.

use super::SqlStore;
use super::db::{DbErr, DbResult, Row, Sql, retry};
use crate::ids::{self, new_uuid7};
use crate::types::*;
use crate::{Result, UserStore};
use async_trait::async_trait;

macro_rules! user_cols {
    () => {
        "id, email, password_hash, system_role, token_version, needs_setup, created_at, updated_at"
    };
}

macro_rules! key_cols {
    () => {
        "id, user_id, name, prefix, created_at, revoked_at"
    };
}

fn user_from_row(r: &Row) -> DbResult<User> {
    Ok(User {
        id: r.text("id")?,
        email: r.text("email")?,
        password_hash: r.opt_text("password_hash")?,
        system_role: r.text("system_role")?,
        token_version: r.int("token_version")?,
        needs_setup: r.boolean("needs_setup")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

fn key_from_row(r: &Row) -> DbResult<ApiKey> {
    Ok(ApiKey {
        id: r.text("id")?,
        user_id: r.text("user_id")?,
        name: r.text("name")?,
        prefix: r.text("prefix")?,
        created_at: r.ts("created_at")?,
        revoked_at: r.opt_ts("revoked_at")?,
    })
}

impl SqlStore {
    async fn create_user_once(
        &self,
        user: &NewUser,
        id: &str,
        first_admin: bool,
    ) -> DbResult<User> {
        let mut tx = self.db.begin().await?;
        if first_admin {
            let lock = self.dialect().pick(
                "SELECT id FROM users WHERE system_role = 'admin' AND needs_setup = $1 LIMIT 1",
                "SELECT id FROM users WHERE system_role = 'admin' AND needs_setup = $1 LIMIT 1 FOR UPDATE",
            );
            if tx.opt(Sql::new(lock).arg(false.into())).await?.is_some() {
                return Err(DbErr::conflict("System already initialized"));
            }
        }
        let now = ids::now();
        let row = tx
            .opt(
                Sql::new(concat!(
                    "INSERT INTO users (",
                    user_cols!(),
                    ") VALUES ($1, $2, $3, $4, 0, $5, $6, $6) RETURNING ",
                    user_cols!()
                ))
                .bind(id)
                .bind(user.email.to_lowercase())
                .bind(user.password_hash.clone())
                .bind(user.system_role.as_str())
                .arg(user.needs_setup.into())
                .arg(super::db::Arg::ts(now)),
            )
            .await;
        let user = match row {
            Ok(Some(row)) => user_from_row(&row)?,
            Ok(None) => return Err(DbErr::corrupt("INSERT … RETURNING returned no row")),
            Err(e) if e.is_unique_violation() => {
                return Err(DbErr::conflict("Email already registered"));
            }
            Err(e) => return Err(e),
        };
        tx.commit().await?;
        Ok(user)
    }

    async fn user_where_once(&self, sql: &'static str, value: &str) -> DbResult<Option<User>> {
        self.db
            .read_opt(Sql::new(sql).bind(value))
            .await?
            .as_ref()
            .map(user_from_row)
            .transpose()
    }

    async fn set_password_once(&self, user_id: &str, hash: &str) -> DbResult<User> {
        let row = self
            .db
            .write_opt(
                Sql::new(concat!(
                    "UPDATE users SET password_hash = $2, token_version = token_version + 1, ",
                    "updated_at = $3 WHERE id = $1 RETURNING ",
                    user_cols!()
                ))
                .bind(user_id)
                .bind(hash)
                .arg(super::db::Arg::ts(ids::now())),
            )
            .await?
            .ok_or_else(|| DbErr::not_found(format!("User {user_id} not found")))?;
        user_from_row(&row)
    }

    async fn create_api_key_once(&self, key: &NewApiKey, id: &str) -> DbResult<ApiKey> {
        let row = self
            .db
            .write_opt(
                Sql::new(concat!(
                    "INSERT INTO api_keys (id, user_id, name, key_hash, prefix, created_at) ",
                    "SELECT $1, id, $3, $4, $5, $6 FROM users WHERE id = $2 RETURNING ",
                    key_cols!()
                ))
                .bind(id)
                .bind(key.user_id.as_str())
                .bind(key.name.as_str())
                .bind(key.key_hash.as_str())
                .bind(key.prefix.as_str())
                .arg(super::db::Arg::ts(ids::now())),
            )
            .await?
            .ok_or_else(|| DbErr::not_found(format!("User {} not found", key.user_id)))?;
        key_from_row(&row)
    }

    async fn api_key_user_once(&self, key_hash: &str) -> DbResult<Option<(ApiKey, User)>> {
        let row = self
            .db
            .read_opt(
                Sql::new(concat!(
                    "SELECT k.id AS key_id, k.name, k.prefix, k.created_at AS key_created_at, ",
                    "k.revoked_at, u.id, u.email, u.password_hash, u.system_role, ",
                    "u.token_version, u.needs_setup, u.created_at, u.updated_at ",
                    "FROM api_keys k JOIN users u ON u.id = k.user_id ",
                    "WHERE k.key_hash = $1 AND k.revoked_at IS NULL"
                ))
                .bind(key_hash),
            )
            .await?;
        let Some(r) = row else { return Ok(None) };
        let user = user_from_row(&r)?;
        let key = ApiKey {
            id: r.text("key_id")?,
            user_id: user.id.clone(),
            name: r.text("name")?,
            prefix: r.text("prefix")?,
            created_at: r.ts("key_created_at")?,
            revoked_at: r.opt_ts("revoked_at")?,
        };
        Ok(Some((key, user)))
    }

    async fn list_api_keys_once(&self, user_id: Option<&str>) -> DbResult<Vec<ApiKey>> {
        let sql = match user_id {
            Some(u) => Sql::new(concat!(
                "SELECT ",
                key_cols!(),
                " FROM api_keys WHERE user_id = $1 ORDER BY created_at, id"
            ))
            .bind(u),
            None => Sql::new(concat!(
                "SELECT ",
                key_cols!(),
                " FROM api_keys ORDER BY created_at, id"
            )),
        };
        self.db
            .read_all(sql)
            .await?
            .iter()
            .map(key_from_row)
            .collect()
    }

    async fn revoke_api_key_once(&self, id: &str) -> DbResult<bool> {
        let n = self
            .db
            .write_exec(
                Sql::new(
                    "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                )
                .bind(id)
                .arg(super::db::Arg::ts(ids::now())),
            )
            .await?;
        Ok(n > 0)
    }

    async fn count_users_once(&self) -> DbResult<u64> {
        let row = self
            .db
            .read_opt(Sql::new("SELECT COUNT(*) AS n FROM users"))
            .await?
            .ok_or_else(|| DbErr::corrupt("COUNT returned no row"))?;
        Ok(u64::try_from(row.int("n")?).unwrap_or(0))
    }

    async fn has_admin_once(&self) -> DbResult<bool> {
        Ok(self
            .db
            .read_opt(
                Sql::new(
                    "SELECT id FROM users WHERE system_role = 'admin' AND needs_setup = $1 LIMIT 1",
                )
                .arg(false.into()),
            )
            .await?
            .is_some())
    }

    async fn initialize_admin_once(&self, id: &str, email: &str, hash: &str) -> DbResult<User> {
        let mut tx = self.db.begin().await?;
        // One initialization at a time: on Postgres a transaction-scoped advisory lock (there
        // may be no admin row to lock yet); SQLite has one writer.
        if self.dialect() == super::db::Dialect::Postgres {
            tx.exec(Sql::new(
                "SELECT pg_advisory_xact_lock(hashtext('fawn_initialize_admin'))",
            ))
            .await?;
        }
        let admins = tx
            .all(Sql::new(
                "SELECT id, needs_setup FROM users WHERE system_role = 'admin' ORDER BY created_at, id",
            ))
            .await?;
        let mut pending = None;
        for r in &admins {
            if !r.boolean("needs_setup")? {
                return Err(DbErr::conflict("System already initialized"));
            }
            pending.get_or_insert(r.text("id")?);
        }
        let now = super::db::Arg::ts(ids::now());
        let sql = match &pending {
            // The admin made on first start becomes the one the setup describes: its id,
            // keys and threads stay; every session it had (none: it had no password) ends.
            Some(admin) => Sql::new(concat!(
                "UPDATE users SET email = $2, password_hash = $3, needs_setup = $4, ",
                "token_version = token_version + 1, updated_at = $5 WHERE id = $1 RETURNING ",
                user_cols!()
            ))
            .bind(admin.as_str())
            .bind(email.to_lowercase())
            .bind(hash)
            .arg(false.into())
            .arg(now),
            None => Sql::new(concat!(
                "INSERT INTO users (",
                user_cols!(),
                ") VALUES ($1, $2, $3, 'admin', 0, $4, $5, $5) RETURNING ",
                user_cols!()
            ))
            .bind(id)
            .bind(email.to_lowercase())
            .bind(hash)
            .arg(false.into())
            .arg(now),
        };
        let user = match tx.opt(sql).await {
            Ok(Some(row)) => user_from_row(&row)?,
            Ok(None) => return Err(DbErr::corrupt("initializing the admin returned no row")),
            Err(e) if e.is_unique_violation() => {
                return Err(DbErr::conflict("Email already registered"));
            }
            Err(e) => return Err(e),
        };
        tx.commit().await?;
        Ok(user)
    }
}

#[async_trait]
impl UserStore for SqlStore {
    async fn create_user(&self, user: NewUser, first_admin: bool) -> Result<User> {
        let id = new_uuid7();
        retry!(self.create_user_once(&user, &id, first_admin))
    }

    async fn get_user(&self, user_id: &str) -> Result<Option<User>> {
        retry!(self.user_where_once(
            concat!("SELECT ", user_cols!(), " FROM users WHERE id = $1"),
            user_id
        ))
    }

    async fn user_by_email(&self, email: &str) -> Result<Option<User>> {
        let email = email.to_lowercase();
        retry!(self.user_where_once(
            concat!("SELECT ", user_cols!(), " FROM users WHERE email = $1"),
            &email
        ))
    }

    async fn count_users(&self) -> Result<u64> {
        retry!(self.count_users_once())
    }

    async fn has_admin(&self) -> Result<bool> {
        retry!(self.has_admin_once())
    }

    async fn initialize_admin(&self, email: &str, password_hash: &str) -> Result<User> {
        let id = new_uuid7();
        retry!(self.initialize_admin_once(&id, email, password_hash))
    }

    async fn set_password(&self, user_id: &str, password_hash: &str) -> Result<User> {
        retry!(self.set_password_once(user_id, password_hash))
    }

    async fn create_api_key(&self, key: NewApiKey) -> Result<ApiKey> {
        let id = new_uuid7();
        retry!(self.create_api_key_once(&key, &id))
    }

    async fn api_key_user(&self, key_hash: &str) -> Result<Option<(ApiKey, User)>> {
        retry!(self.api_key_user_once(key_hash))
    }

    async fn list_api_keys(&self, user_id: Option<&str>) -> Result<Vec<ApiKey>> {
        retry!(self.list_api_keys_once(user_id))
    }

    async fn revoke_api_key(&self, key_id: &str) -> Result<bool> {
        retry!(self.revoke_api_key_once(key_id))
    }
}
