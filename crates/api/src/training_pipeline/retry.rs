//! `spec.retryPolicy`: how a failed training attempt is treated, by the workload's exit code.
//! The shape follows `batch/v1` Job's `podFailurePolicy` (rules checked in order, the first match
//! decides; `onExitCodes` with `In` / `NotIn`), so users who know Jobs read it at once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Rules for failed training attempts (Vertex AI jobs and TPU VM workloads), checked in order;
/// the first rule whose exit codes match decides. A failure no rule matches, or whose exit code
/// is unknown, counts against `maxRetries` as without a policy. Preemptions and capacity waits
/// are not failures and never reach these rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// The rules, first match wins.
    #[schemars(length(min = 1, max = 20))]
    pub rules: Vec<RetryRule>,
}

/// One rule: a set of exit codes and what a failure with one of them does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryRule {
    /// What a matching failure does.
    pub action: RetryAction,
    /// The exit codes the rule matches.
    pub on_exit_codes: ExitCodes,
}

/// What a failure matching a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RetryAction {
    /// The run fails now, with no retry (e.g. exit code 3 = a bad config that no retry fixes).
    FailRun,
    /// Retry at once without spending `maxRetries` (e.g. a flaky data loader). After 10 attempts
    /// that did not count (these and preemptions together) a further one counts, so a workload
    /// that always fails this way still ends.
    Ignore,
    /// Retry while `maxRetries` allows: what happens without a rule.
    Count,
}

/// Exit codes, as a set the code is `In` or `NotIn`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExitCodes {
    /// Whether the rule matches codes in `values` or codes not in them.
    pub operator: ExitCodeOperator,
    /// Exit codes 1 to 255 (0 is success and never a failure).
    #[schemars(length(min = 1, max = 255), inner(range(min = 1, max = 255)))]
    pub values: Vec<i32>,
}

/// How `values` is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ExitCodeOperator {
    In,
    NotIn,
}

impl RetryPolicy {
    /// What a failure with `exit_code` does (`None`: the code is unknown, so no rule matches),
    /// with the 1-based index of the deciding rule.
    pub fn decide(&self, exit_code: Option<i32>) -> (RetryAction, Option<usize>) {
        let Some(code) = exit_code else {
            return (RetryAction::Count, None);
        };
        self.rules
            .iter()
            .position(|r| r.on_exit_codes.matches(code))
            .map_or((RetryAction::Count, None), |i| {
                (self.rules[i].action, Some(i + 1))
            })
    }
}

impl ExitCodes {
    fn matches(&self, code: i32) -> bool {
        let listed = self.values.contains(&code);
        match self.operator {
            ExitCodeOperator::In => listed,
            ExitCodeOperator::NotIn => !listed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: RetryAction, operator: ExitCodeOperator, values: &[i32]) -> RetryRule {
        RetryRule {
            action,
            on_exit_codes: ExitCodes {
                operator,
                values: values.to_vec(),
            },
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_an_unknown_code_counts() {
        use ExitCodeOperator::*;
        use RetryAction::*;
        let policy = RetryPolicy {
            rules: vec![
                rule(FailRun, In, &[3]),
                rule(Ignore, In, &[137, 143]),
                rule(FailRun, NotIn, &[1, 2]),
            ],
        };
        let cases = [
            (Some(3), (FailRun, Some(1))),
            (Some(137), (Ignore, Some(2))),
            (Some(1), (Count, None)),
            (Some(42), (FailRun, Some(3))),
            (None, (Count, None)),
        ];
        for (code, want) in cases {
            assert_eq!(policy.decide(code), want, "exit code {code:?}");
        }
    }
}
