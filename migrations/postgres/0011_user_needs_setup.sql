-- An account waiting for its setup (DeerFlow's `users.needs_setup`): the admin `fawn serve`
-- creates on first start, with an API key and no password, until the web UI's setup
-- (`/api/v1/auth/initialize`) gives it an email and a password. Such an admin does not
-- count as the system being set up.
ALTER TABLE users ADD COLUMN needs_setup BOOLEAN NOT NULL DEFAULT FALSE;
