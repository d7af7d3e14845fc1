//! Where the files and directories come from, and in which order.

use fawn_config::{LoadOptions, load};
use std::path::Path;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

fn model(name: &str) -> String {
    format!("models:\n  - name: {name}\n    use: langchain_openai:ChatOpenAI\n    model: m\n")
}

fn loaded_model(opts: &LoadOptions) -> String {
    let l = load(opts).unwrap_or_else(|e| panic!("{e}"));
    l.settings.app.models[0].name.clone()
}

#[test]
fn config_path_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let explicit = write(d, "explicit.yaml", &model("explicit"));
    let fawn = write(d, "fawn.yaml", &model("fawn"));
    let deer = write(d, "deer.yaml", &model("deer"));
    write(d, "config.yaml", &model("local"));
    let all = |with_explicit: bool, fawn_on: bool, deer_on: bool| {
        let (f, df) = (fawn.display().to_string(), deer.display().to_string());
        let opts = LoadOptions::with_lookup(d, move |name| match name {
            "FAWN_CONFIG" if fawn_on => Some(f.clone()),
            "DEER_FLOW_CONFIG_PATH" if deer_on => Some(df.clone()),
            _ => None,
        });
        if with_explicit {
            opts.config_path(&explicit)
        } else {
            opts
        }
    };
    assert_eq!(loaded_model(&all(true, true, true)), "explicit");
    assert_eq!(loaded_model(&all(false, true, true)), "fawn");
    assert_eq!(loaded_model(&all(false, false, true)), "deer");
    assert_eq!(loaded_model(&all(false, false, false)), "local");
    // Relative explicit paths resolve against the working directory.
    let rel = LoadOptions::with_vars(d, Vec::<(String, String)>::new()).config_path("deer.yaml");
    assert_eq!(loaded_model(&rel), "deer");
}

#[test]
fn no_config_at_all_means_defaults_and_no_models() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LoadOptions::with_vars(dir.path(), Vec::<(String, String)>::new());
    let l = load(&opts).unwrap();
    assert!(l.settings.app.models.is_empty());
    assert!(l.settings.config_path.is_none());
    assert!(l.settings.extensions_path.is_none());
    assert_eq!(l.settings.home, dir.path().join(".fawn"));
    assert_eq!(l.settings.skills_dir, dir.path().join("skills"));
    assert_eq!(l.settings.app.sandbox.bash_command_timeout, 600);
}

#[test]
fn a_named_file_that_does_not_exist_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "config.yaml", &model("local"));
    let missing = d.join("nope.yaml");
    let err =
        load(&LoadOptions::with_vars(d, Vec::<(String, String)>::new()).config_path(&missing))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "config.yaml: config file {} (from --config) does not exist",
            missing.display()
        )
    );
    for var in ["FAWN_CONFIG", "DEER_FLOW_CONFIG_PATH"] {
        let err = load(&LoadOptions::with_vars(d, [(var, "nope.yaml")])).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("(from {var}) does not exist")),
            "{err}"
        );
    }
    for var in ["FAWN_EXTENSIONS_CONFIG", "DEER_FLOW_EXTENSIONS_CONFIG_PATH"] {
        let err = load(&LoadOptions::with_vars(d, [(var, "nope.json")])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("extensions_config.json: extensions file"),
            "{err}"
        );
    }
    // An empty variable counts as unset.
    assert_eq!(
        loaded_model(&LoadOptions::with_vars(d, [("FAWN_CONFIG", "")])),
        "local"
    );
}

#[test]
fn extensions_path_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ext = |skill: &str| format!("{{\"skills\": {{\"{skill}\": {{\"enabled\": false}}}}}}");
    let cfg = write(d, "conf/config.yaml", &model("m"));
    write(d, "conf/extensions_config.json", &ext("beside"));
    let fawn = write(d, "fawn.json", &ext("fawn"));
    let deer = write(d, "deer.json", &ext("deer"));
    let skill_of = |vars: Vec<(&str, String)>| {
        let opts = LoadOptions::with_vars(d, vars).config_path(&cfg);
        let l = load(&opts).unwrap_or_else(|e| panic!("{e}"));
        l.settings.extensions.skills.keys().next().cloned().unwrap()
    };
    let (f, df) = (fawn.display().to_string(), deer.display().to_string());
    assert_eq!(
        skill_of(vec![
            ("FAWN_EXTENSIONS_CONFIG", f.clone()),
            ("DEER_FLOW_EXTENSIONS_CONFIG_PATH", df.clone())
        ]),
        "fawn"
    );
    assert_eq!(
        skill_of(vec![("DEER_FLOW_EXTENSIONS_CONFIG_PATH", df)]),
        "deer"
    );
    assert_eq!(skill_of(vec![]), "beside");
    // Not beside the config file, not found: no extensions.
    let other = write(d, "elsewhere/config.yaml", &model("m"));
    let l = load(&LoadOptions::with_vars(d, Vec::<(String, String)>::new()).config_path(&other))
        .unwrap();
    assert!(l.settings.extensions_path.is_none());
    assert!(l.settings.extensions.skills.is_empty());
}

#[test]
fn home_and_skills_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write(d, "conf/config.yaml", "skills:\n  path: ../my-skills\n");
    let home_of = |vars: Vec<(&str, &str)>| {
        load(&LoadOptions::with_vars(d, vars).config_path(&cfg))
            .unwrap()
            .settings
    };
    assert_eq!(
        home_of(vec![
            ("FAWN_HOME", "/data/fawn"),
            ("DEER_FLOW_HOME", "/data/deer")
        ])
        .home,
        Path::new("/data/fawn")
    );
    assert_eq!(
        home_of(vec![("DEER_FLOW_HOME", "/data/deer")]).home,
        Path::new("/data/deer")
    );
    assert_eq!(home_of(vec![("DEER_FLOW_HOME", "rel")]).home, d.join("rel"));
    assert_eq!(home_of(vec![]).home, d.join(".fawn"));
    // skills.path is relative to the config file's directory.
    assert_eq!(
        home_of(vec![]).skills_dir,
        d.join("conf").join("../my-skills")
    );
    let cfg2 = write(
        d,
        "conf2/config.yaml",
        "skills:\n  container_path: /mnt/skills\n",
    );
    // Without skills.path: the skills/ directory next to the config file.
    let s = load(&LoadOptions::with_vars(d, Vec::<(&str, &str)>::new()).config_path(&cfg2))
        .unwrap()
        .settings;
    assert_eq!(s.skills_dir, d.join("conf2").join("skills"));
    let s = load(
        &LoadOptions::with_vars(d, [("DEER_FLOW_SKILLS_PATH", "/opt/skills")]).config_path(&cfg2),
    )
    .unwrap()
    .settings;
    assert_eq!(s.skills_dir, Path::new("/opt/skills"));
}

#[test]
fn database_url_overrides_the_database_section() {
    let yaml = "database:\n  backend: sqlite\n  postgres_schema: fawn\n";
    let l = crate::load_with(yaml, None, &[("DATABASE_URL", "postgres://u:secret@db/x")]).unwrap();
    let db = l.settings.app.database.unwrap();
    assert_eq!(db.backend.as_deref(), Some("postgres"));
    assert_eq!(db.url.as_deref(), Some("postgres://u:secret@db/x"));
    assert_eq!(db.postgres_schema.as_deref(), Some("fawn"));
    let l = crate::load_with("", None, &[("DATABASE_URL", "sqlite:///tmp/x.db")]).unwrap();
    assert_eq!(
        l.settings.app.database.unwrap().backend.as_deref(),
        Some("sqlite")
    );
    let err = crate::load_with("", None, &[("DATABASE_URL", "mysql://u:secret@db/x")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "DATABASE_URL: unsupported URL scheme; expected postgres://, postgresql:// or sqlite:"
    );
    assert!(!err.to_string().contains("secret"));
    // Postgres without a URL anywhere is an error.
    assert_eq!(
        crate::error_lines(crate::load_with(
            "database:\n  backend: postgres\n",
            None,
            &[]
        )),
        ["database.postgres_url: is required when backend is postgres (or set DATABASE_URL)"]
    );
}

#[test]
fn problems_name_the_file_as_it_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write(d, "deerflow-prod.yaml", "models: [\n");
    let err = load(&LoadOptions::with_vars(d, Vec::<(String, String)>::new()).config_path(&cfg))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("deerflow-prod.yaml: invalid YAML"), "{err}");
    assert!(!err.contains("config.yaml"), "{err}");
}

#[test]
fn long_comment_blocks_under_a_key_load() {
    // DeerFlow's example config follows `models:` with well over 32 comment lines (every
    // provider, commented out) before the first entry; a parser budget on buffered comments
    // refused it.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut yaml = String::from("models:\n");
    for i in 0..200 {
        yaml.push_str(&format!(
            "  # - name: provider-{i}   # use: some.module:Class{i}\n"
        ));
    }
    yaml.push_str("  - name: kept\n    use: langchain_openai:ChatOpenAI\n    model: m\n");
    yaml.push_str("tools:\n");
    for i in 0..80 {
        yaml.push_str(&format!("  # tool {i}\n"));
    }
    yaml.push_str("  - name: ls\n    group: file:read\n    use: deerflow.sandbox.tools:ls_tool\n");
    let cfg = write(d, "config.yaml", &yaml);
    let l =
        load(&LoadOptions::with_vars(d, Vec::<(String, String)>::new()).config_path(&cfg)).unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.settings.app.models.len(), 1);
    assert_eq!(l.settings.app.models[0].name, "kept");
    assert_eq!(l.settings.app.tools.len(), 1);
}

#[test]
fn concurrency_comes_from_the_queue_section_or_the_environment() {
    let limit = |l: fawn_config::Loaded| l.settings.app.queue.max_concurrent_runs;
    // Unset: the runtime sizes it.
    assert_eq!(limit(crate::load_with("", None, &[]).unwrap()), None);
    let yaml = "queue:\n  max_concurrent_runs: 64\n";
    assert_eq!(limit(crate::load_with(yaml, None, &[]).unwrap()), Some(64));
    // The official server's name overrides the file; Fawn's own name overrides both.
    let official = [("N_JOBS_PER_WORKER", "500")];
    assert_eq!(
        limit(crate::load_with(yaml, None, &official).unwrap()),
        Some(500)
    );
    let both = [
        ("N_JOBS_PER_WORKER", "500"),
        ("FAWN_MAX_CONCURRENT_RUNS", "7"),
    ];
    assert_eq!(limit(crate::load_with(yaml, None, &both).unwrap()), Some(7));
    // An empty value counts as unset.
    let empty = [
        ("FAWN_MAX_CONCURRENT_RUNS", " "),
        ("N_JOBS_PER_WORKER", "9"),
    ];
    assert_eq!(limit(crate::load_with("", None, &empty).unwrap()), Some(9));
    // Nonsense is an error naming where it came from.
    assert_eq!(
        crate::error_lines(crate::load_with("", None, &[("N_JOBS_PER_WORKER", "lots")])),
        ["N_JOBS_PER_WORKER: must be a whole number between 1 and 1000000, got \"lots\""]
    );
    assert_eq!(
        crate::error_lines(crate::load_with(
            "",
            None,
            &[("FAWN_MAX_CONCURRENT_RUNS", "0")]
        )),
        ["FAWN_MAX_CONCURRENT_RUNS: must be a whole number between 1 and 1000000, got \"0\""]
    );
    assert_eq!(
        crate::error_lines(crate::load_with(
            "queue:\n  max_concurrent_runs: 0\n",
            None,
            &[]
        )),
        ["queue.max_concurrent_runs: must be between 1 and 1000000, got 0"]
    );
}
