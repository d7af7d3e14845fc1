//! Which environment a stdio MCP server may be given. The allowed launchers (`npx`, `uvx`, …)
//! read many variables that run code or point at files that do (`npm_config_call`,
//! `NODE_OPTIONS`, `UV_CONFIG_FILE`, `PYTHONSTARTUP`, `LD_PRELOAD`, a `HOME` with an
//! `.npmrc`, a `PATH` that finds another `npx`, …). Those are refused wherever a server's
//! configuration is accepted (the gateway's PUT) and again when a server is started, so a
//! configuration written before this check existed cannot run either.

/// Exact names refused (compared upper-cased).
const REFUSED_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "ENV",
    "BASH_ENV",
    "SHELL",
    "SHELLOPTS",
    "BASHOPTS",
    "PROMPT_COMMAND",
    "IFS",
    "GCONV_PATH",
    "CLASSPATH",
    "VIRTUAL_ENV",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_HOME",
    "XDG_DATA_DIRS",
    "XDG_CACHE_HOME",
];

/// Name prefixes refused (compared upper-cased): npm/node and other JS launchers, Python,
/// pip and uv, the dynamic loader, git (hooks, `core.sshCommand`), Perl, Ruby and Java.
const REFUSED_PREFIXES: &[&str] = &[
    "NPM_CONFIG_",
    "NPM_",
    "NODE_",
    "NPX_",
    "COREPACK_",
    "YARN_",
    "PNPM_",
    "BUN_",
    "DENO_",
    "PYTHON",
    "PIP_",
    "UV_",
    "LD_",
    "DYLD_",
    "GIT_",
    "PERL",
    "RUBY",
    "JAVA_",
    "_JAVA_",
    "JDK_JAVA_",
];

/// Why `key` may not be set in a stdio server's environment; `None` when it may.
pub fn env_key_refusal(key: &str) -> Option<&'static str> {
    let plain = !key.is_empty()
        && key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Some("is not a plain variable name (letters, digits and `_`)");
    }
    let upper = key.to_ascii_uppercase();
    if REFUSED_NAMES.contains(&upper.as_str())
        || REFUSED_PREFIXES.iter().any(|p| upper.starts_with(p))
    {
        return Some("can make the launcher run other code and is not allowed");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_code_paths_are_refused_and_credentials_are_not() {
        for bad in [
            "npm_config_call",
            "NPM_CONFIG_USERCONFIG",
            "npm_config_script_shell",
            "NODE_OPTIONS",
            "node_path",
            "PYTHONSTARTUP",
            "PYTHONPATH",
            "UV_CONFIG_FILE",
            "UV_INDEX_URL",
            "PIP_INDEX_URL",
            "LD_PRELOAD",
            "DYLD_INSERT_LIBRARIES",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_PARAMETERS",
            "PATH",
            "Home",
            "BASH_ENV",
            "XDG_CONFIG_HOME",
            "PERL5OPT",
            "RUBYOPT",
            "JAVA_TOOL_OPTIONS",
            "A B",
            "A=B",
            "",
            "1X",
        ] {
            assert!(env_key_refusal(bad).is_some(), "{bad} must be refused");
        }
        for ok in [
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "TAVILY_API_KEY",
            "MCP_PORT",
            "BRAVE_API_KEY",
            "_PRIVATE",
            "DATABASE_URL",
        ] {
            assert_eq!(env_key_refusal(ok), None, "{ok} must be allowed");
        }
    }
}
