//! `$(RAW_DATA)`, `$(PROCESSED_DATA)`, `$(MODEL_DIR)` and `$(CHECKPOINT_DIR)` in the preprocess
//! template and the
//! training container, with Kubernetes' own `$(VAR)` rules (as for a Pod's `command`, `args` and
//! `env`), so users need to learn nothing new:
//! - `$(NAME)` becomes the value of `NAME` when it is defined;
//! - `$(NAME)` for an unknown name stays as written;
//! - `$$` is an escaped `$`, so `$$(MODEL_DIR)` is the literal text `$(MODEL_DIR)`;
//! - a `$` not followed by `$` or `(`, and an unterminated `$(`, stay as written.
//!
//! Does not touch Kubernetes or Google Cloud.

use tpu_operator_api::{
    common::{ContainerSpec, EnvVar},
    preprocess_batch::BatchTemplate,
    training_pipeline::{Artifacts, CHECKPOINT_DIR_ENV},
};

use super::checkpoints;

/// The variables of a pipeline, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars(Vec<(&'static str, String)>);

impl Vars {
    /// `RAW_DATA`, `PROCESSED_DATA` (when set), `MODEL_DIR` and `CHECKPOINT_DIR` (the base
    /// checkpoint directory; see [`Vars::with_checkpoint_dir`]) from the pipeline's artifacts.
    pub fn from_artifacts(artifacts: &Artifacts) -> Self {
        let mut vars = Vec::new();
        if let Some(raw) = &artifacts.raw_data {
            vars.push(("RAW_DATA", raw.clone()));
        }
        if let Some(processed) = &artifacts.processed_data {
            vars.push(("PROCESSED_DATA", processed.clone()));
        }
        vars.push(("MODEL_DIR", artifacts.model_dir.clone()));
        vars.push((CHECKPOINT_DIR_ENV, checkpoints::base_dir(artifacts)));
        Self(vars)
    }

    /// The training attempt's own `CHECKPOINT_DIR` (see [`checkpoints::attempt_dir`]).
    pub fn with_checkpoint_dir(mut self, dir: &str) -> Self {
        for (name, value) in &mut self.0 {
            if *name == CHECKPOINT_DIR_ENV {
                *value = dir.to_string();
            }
        }
        self
    }

    /// The value of `CHECKPOINT_DIR`.
    pub fn checkpoint_dir(&self) -> &str {
        self.get(CHECKPOINT_DIR_ENV).unwrap_or_default()
    }

    /// Environment variables with their values expanded, and `CHECKPOINT_DIR` set to the
    /// attempt's directory (replacing one the spec sets itself: the directory the operator lists
    /// for progress is the one the workload must use).
    pub fn env(&self, env: &[EnvVar]) -> Vec<EnvVar> {
        let mut out: Vec<EnvVar> = env
            .iter()
            .filter(|e| e.name != CHECKPOINT_DIR_ENV)
            .map(|e| EnvVar {
                name: e.name.clone(),
                value: self.expand(&e.value),
            })
            .collect();
        out.push(EnvVar {
            name: CHECKPOINT_DIR_ENV.to_string(),
            value: self.checkpoint_dir().to_string(),
        });
        out
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// Expands one string.
    pub fn expand(&self, input: &str) -> String {
        let mut out = String::with_capacity(input.len());
        let mut rest = input;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            match after.chars().next() {
                // `$$` is an escaped `$`.
                Some('$') => {
                    out.push('$');
                    rest = &after[1..];
                }
                Some('(') => match after.find(')') {
                    Some(close) => {
                        let name = &after[1..close];
                        match self.get(name) {
                            Some(value) => out.push_str(value),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        rest = &after[close + 1..];
                    }
                    // Unterminated reference: kept as written.
                    None => {
                        out.push_str("$(");
                        rest = &after[1..];
                    }
                },
                // A lone `$` (also at the very end) is kept.
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    fn expand_all(&self, items: &mut [String]) {
        for item in items {
            *item = self.expand(item);
        }
    }

    /// The container with its command, args and env values expanded, and `CHECKPOINT_DIR` in
    /// its environment.
    pub fn container(&self, container: &ContainerSpec) -> ContainerSpec {
        let mut c = container.clone();
        self.expand_all(&mut c.command);
        self.expand_all(&mut c.args);
        c.env = self.env(&container.env);
        c
    }

    /// The args, expanded.
    pub fn args(&self, args: &[String]) -> Vec<String> {
        args.iter().map(|a| self.expand(a)).collect()
    }

    /// The batch template with its arguments, SQL variables, declared inputs and output expanded.
    pub fn batch(&self, template: &BatchTemplate) -> BatchTemplate {
        let mut t = template.clone();
        if let Some(p) = &mut t.pyspark {
            self.expand_all(&mut p.args);
        }
        if let Some(s) = &mut t.spark {
            self.expand_all(&mut s.args);
        }
        if let Some(r) = &mut t.spark_r {
            self.expand_all(&mut r.args);
        }
        if let Some(sql) = &mut t.spark_sql {
            for value in sql.query_variables.values_mut() {
                *value = self.expand(value);
            }
        }
        self.expand_all(&mut t.inputs);
        if let Some(out) = &mut t.output_uri {
            *out = self.expand(out);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpu_operator_api::preprocess_batch::PySparkBatch;

    fn vars() -> Vars {
        Vars::from_artifacts(&Artifacts {
            raw_data: Some("gs://b/raw/".into()),
            processed_data: Some("gs://b/processed/".into()),
            model_dir: "gs://b/models/run-1/".into(),
            ..Default::default()
        })
    }

    #[test]
    fn expands_like_kubernetes() {
        let v = vars();
        for (input, want) in [
            ("--data=$(PROCESSED_DATA)", "--data=gs://b/processed/"),
            ("$(RAW_DATA)$(MODEL_DIR)", "gs://b/raw/gs://b/models/run-1/"),
            ("$$(MODEL_DIR)", "$(MODEL_DIR)"),
            ("$$$(MODEL_DIR)", "$gs://b/models/run-1/"),
            ("$$$$", "$$"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$(UNKNOWN", "$(UNKNOWN"),
            ("$()", "$()"),
            ("cost: 5$", "cost: 5$"),
            ("$HOME and $1", "$HOME and $1"),
            ("plain", "plain"),
            ("", ""),
            ("é$(MODEL_DIR)ü", "égs://b/models/run-1/ü"),
        ] {
            assert_eq!(v.expand(input), want, "input {input:?}");
        }
    }

    #[test]
    fn undefined_artifacts_stay_as_written() {
        let v = Vars::from_artifacts(&Artifacts {
            model_dir: "gs://b/m/".into(),
            ..Default::default()
        });
        assert_eq!(v.expand("$(RAW_DATA) $(MODEL_DIR)"), "$(RAW_DATA) gs://b/m/");
    }

    #[test]
    fn expands_container_command_args_and_env_values_only() {
        let c = ContainerSpec {
            image: "img:$(MODEL_DIR)".into(),
            command: vec!["python".into(), "-m$(RAW_DATA)".into()],
            args: vec!["--out=$(MODEL_DIR)".into()],
            env: vec![EnvVar {
                name: "DATA".into(),
                value: "$(PROCESSED_DATA)".into(),
            }],
        };
        let got = vars().container(&c);
        assert_eq!(got.image, "img:$(MODEL_DIR)", "the image is not expanded");
        assert_eq!(got.command[1], "-mgs://b/raw/");
        assert_eq!(got.args, ["--out=gs://b/models/run-1/"]);
        assert_eq!(got.env[0].value, "gs://b/processed/");
        assert_eq!(
            (got.env[1].name.as_str(), got.env[1].value.as_str()),
            ("CHECKPOINT_DIR", "gs://b/models/run-1/checkpoints/")
        );
    }

    #[test]
    fn checkpoint_dir_is_a_variable_and_the_env_the_attempt_gets() {
        let v = vars().with_checkpoint_dir("gs://b/ck/attempt-2/");
        assert_eq!(
            v.expand("--ckpt=$(CHECKPOINT_DIR)"),
            "--ckpt=gs://b/ck/attempt-2/"
        );
        let env = v.env(&[
            EnvVar {
                name: "CHECKPOINT_DIR".into(),
                value: "gs://elsewhere/".into(),
            },
            EnvVar {
                name: "RESUME_FROM".into(),
                value: "$(CHECKPOINT_DIR)".into(),
            },
        ]);
        let pairs: Vec<_> = env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("RESUME_FROM", "gs://b/ck/attempt-2/"),
                ("CHECKPOINT_DIR", "gs://b/ck/attempt-2/")
            ]
        );
    }

    #[test]
    fn expands_batch_args_and_output() {
        let t = BatchTemplate {
            pyspark: Some(PySparkBatch {
                main_python_file_uri: "gs://b/p.py".into(),
                args: vec!["--input=$(RAW_DATA)".into(), "--output=$(PROCESSED_DATA)".into()],
                ..Default::default()
            }),
            output_uri: Some("$(PROCESSED_DATA)".into()),
            ..Default::default()
        };
        let got = vars().batch(&t);
        let args = &got.pyspark.as_ref().unwrap().args;
        assert_eq!(args, &["--input=gs://b/raw/", "--output=gs://b/processed/"]);
        assert_eq!(got.output_uri.as_deref(), Some("gs://b/processed/"));
    }
}
