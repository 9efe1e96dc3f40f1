//! A period budget crossed under kills (see `budget_crossing`): a few seeds here, many in
//! `crash-bench --budget N`. Every record meters the one slice's burn exactly once, every
//! action comes into force within 60 emulated seconds of its threshold, and each threshold is
//! announced by exactly one Event, whatever was killed when.

use tpu_operator_reliability::budget_crossing;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_crossed_under_kills_counts_each_second_once_and_misses_no_action() {
    for seed in [1, 2] {
        let seen = budget_crossing::run(seed).await;
        println!(
            "seed {seed}: {} kills, {} writes refused, drift ${:+.4}/${:+.4}, delays {:?}, Events {:?}",
            seen.kills,
            seen.refused_writes,
            seen.max_under_usd,
            seen.max_over_usd,
            seen.delays,
            seen.announced
        );
        assert!(seen.kills > 0, "seed {seed} killed nothing");
        assert!(seen.ok(), "seed {seed}: {:#?}", seen.violations);
    }
}
