//! System rules (`[[system]]`): Sentinel's checks of the whole process's inbound traffic.

use super::core_kind::CoreKind;
use spillway::system::SystemRule;

/// System rules.
pub(super) const SYSTEM: CoreKind<SystemRule> = CoreKind {
    name: "system",
    states_key: None,
    tables: |config| &config.system,
    read: |spillway| spillway.system_rules(),
    states: None,
    validate: spillway::system::validate_system_rules,
    load: |spillway, rules| spillway.load_system_rules(rules),
    title: "System rules",
    template: || serde_json::json!({ "id": "", "max_qps": 1000 }),
    metrics: None,
};
