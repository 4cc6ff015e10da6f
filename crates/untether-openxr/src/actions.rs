//! Actions: the application's action sets and actions, bound through
//! `/interaction_profiles/khr/simple_controller` to what the client sends (its game
//! controller, mouse and keyboard); haptics become the client's controller rumble.
//!
//! | simple_controller source | the client's |
//! |---|---|
//! | `/user/hand/left/input/select/click` | left mouse button, controller LB, left trigger |
//! | `/user/hand/right/input/select/click` | right mouse button, controller A or RB, right trigger |
//! | `/user/hand/left/input/menu/click` | Escape, controller Back |
//! | `/user/hand/right/input/menu/click` | controller Start |
//! | `…/input/grip/pose`, `…/input/aim/pose` | active, never located (no hand tracking) |
//! | `…/output/haptic` | controller 0 rumble |
//!
//! `/interaction_profiles/microsoft/xbox_controller` (`/user/gamepad`) reads the client's
//! game controller: see [`crate::gamepad`]. Other interaction profiles' suggestions are
//! accepted (every application suggests several) and not used.
//!
//! The safe core of the entry points in [`crate::ffi::actions`].

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use openxr_sys as xr;
use openxr_sys::Handle;

use crate::gamepad::{self, XBOX};
use crate::runtime::{self, with_session, Event, Instance};
use crate::session::Session;
use crate::stream::Held;
use crate::table::Table;
use crate::util::{get_str, now};

pub const SIMPLE: &str = "/interaction_profiles/khr/simple_controller";
const HANDS: [&str; 2] = ["/user/hand/left", "/user/hand/right"];
const COMPONENTS: [&str; 5] = [
    "/input/select/click",
    "/input/menu/click",
    "/input/grip/pose",
    "/input/aim/pose",
    "/output/haptic",
];

/// SDL's keycode for Escape; Linux button codes of a game controller.
const KEY_ESCAPE: u32 = 27;
const BTN_SOUTH: u16 = 0x130;
const BTN_TL: u16 = 0x136;
const BTN_TR: u16 = 0x137;
const BTN_SELECT: u16 = 0x13a;
const BTN_START: u16 = 0x13b;

/// The bindings suggested for the profiles the runtime feeds: action → its source paths.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    pub simple: HashMap<u64, Vec<String>>,
    pub gamepad: HashMap<u64, Vec<String>>,
}

impl Bindings {
    /// Every source bound to `action`, in both profiles.
    pub fn sources(&self, action: u64) -> Vec<String> {
        let of = |m: &HashMap<u64, Vec<String>>| m.get(&action).cloned().unwrap_or_default();
        let mut all = of(&self.simple);
        all.extend(of(&self.gamepad));
        all
    }
}

/// The action sets and actions, each kind in its own table (see [`crate::table`] for the
/// lock order). Destroying the instance empties both.
pub static ACTION_SETS: Table<ActionSet> = Table::new();
pub static ACTIONS: Table<Action> = Table::new();

pub struct ActionSet {
    pub name: String,
    /// What changes, behind the set's own lock: creating an action in the set, attaching
    /// it and destroying it exclude each other.
    state: Mutex<SetState>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct SetState {
    pub attached: bool,
    pub destroyed: bool,
}

impl ActionSet {
    pub fn new(name: String) -> Self {
        ActionSet {
            name,
            state: Mutex::default(),
        }
    }

    /// The set's state, locked.
    pub fn state(&self) -> MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn attached(&self) -> bool {
        self.state().attached
    }
}

/// Whether the set `id` exists and is attached to a session.
pub fn set_attached(id: u64) -> bool {
    ACTION_SETS.get(id).is_ok_and(|s| s.attached())
}

/// An action: what it was created with (it never changes).
pub struct Action {
    pub set: u64,
    pub name: String,
    pub ty: xr::ActionType,
    pub subactions: Vec<xr::Path>,
}

/// One action's state after the last sync, per subaction path (NULL: all of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Value {
    pub value: f32,
    /// A 2D action's value (a thumbstick).
    pub xy: [f32; 2],
    pub active: bool,
    pub changed: bool,
    pub since: i64,
}

#[derive(Default)]
pub struct ActionStates {
    pub values: HashMap<(u64, u64), Value>,
}

/// What a source of either profile reads from the client's input, scalars in `x` (None: not
/// an input).
pub fn any_source_value(path: &str, held: &Held) -> Option<[f32; 2]> {
    source_value(path, held)
        .map(|v| [v, 0.0])
        .or_else(|| gamepad::source_value(path, held))
}

/// The strongest of a binding's source values: the largest scalar by magnitude, the longest
/// 2D value.
pub fn strongest(values: &[[f32; 2]]) -> (f32, [f32; 2]) {
    let scalar = values
        .iter()
        .map(|v| v[0])
        .fold(0.0f32, |a, b| if b.abs() > a.abs() { b } else { a });
    let xy = values.iter().copied().fold([0.0f32; 2], |a, b| {
        if b[0].hypot(b[1]) > a[0].hypot(a[1]) {
            b
        } else {
            a
        }
    });
    (scalar, xy)
}

/// What a simple_controller source reads from the client's input (None: not an input).
pub fn source_value(path: &str, held: &Held) -> Option<f32> {
    let b = |code: u16| held.pad_buttons.contains(&code);
    let on = match path {
        "/user/hand/left/input/select/click" => {
            held.mouse.contains(&1) || b(BTN_TL) || held.pad_axes[4] > 0.5
        }
        "/user/hand/right/input/select/click" => {
            held.mouse.contains(&3) || b(BTN_SOUTH) || b(BTN_TR) || held.pad_axes[5] > 0.5
        }
        "/user/hand/left/input/menu/click" => held.keys.contains(&KEY_ESCAPE) || b(BTN_SELECT),
        "/user/hand/right/input/menu/click" => b(BTN_START),
        _ => return None,
    };
    Some(if on { 1.0 } else { 0.0 })
}

fn simple_source_ok(path: &str) -> bool {
    HANDS
        .iter()
        .any(|h| COMPONENTS.iter().any(|c| path == format!("{h}{c}")))
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// Recomputes every attached action of `s` (locked by the caller) from the client's input.
fn sync(s: &mut Session, focused: bool, held: &Held) {
    let Some(inst) = runtime::current() else {
        return;
    };
    // The sets' locks first, then the instance's (the lock order in crate::runtime).
    let attached: Vec<_> = ACTIONS
        .snapshot()
        .into_iter()
        .filter(|(_, a)| set_attached(a.set))
        .collect();
    let inst = inst.state();
    let t = now().as_nanos();
    let mut fresh = Vec::new();
    for (id, a) in attached {
        let sources = inst.bindings.sources(id);
        let mut subs: Vec<xr::Path> = vec![xr::Path::NULL];
        subs.extend(a.subactions.iter().copied());
        for sub in subs {
            let prefix = inst.path_str(sub).map(|p| format!("{p}/"));
            let chosen: Vec<&String> = sources
                .iter()
                .filter(|s| prefix.as_ref().is_none_or(|p| s.starts_with(p.as_str())))
                .collect();
            let values: Vec<[f32; 2]> = chosen
                .iter()
                .filter_map(|s| any_source_value(s, held))
                .collect();
            let (value, xy) = strongest(&values);
            let active = focused && !chosen.is_empty();
            fresh.push(((id, sub.into_raw()), value, xy, active));
        }
    }
    drop(inst);
    for (key, value, xy, active) in fresh {
        let old = s
            .action_states
            .values
            .get(&key)
            .copied()
            .unwrap_or_default();
        let (value, xy) = if active { (value, xy) } else { (0.0, [0.0; 2]) };
        let changed = active && old.active && (old.value != value || old.xy != xy);
        s.action_states.values.insert(
            key,
            Value {
                value,
                xy,
                active,
                changed,
                since: if changed { t } else { old.since },
            },
        );
    }
}

/// `xrCreateActionSet`.
pub fn create_action_set(
    instance: xr::Instance,
    info: &xr::ActionSetCreateInfo,
) -> Result<xr::ActionSet, xr::Result> {
    // The instance slot is held while the set is added: destroying the instance empties the
    // table under its write lock.
    let slot = runtime::slot();
    match slot.as_ref() {
        Some(i) if i.id == instance.into_raw() => {}
        _ => return Err(xr::Result::ERROR_HANDLE_INVALID),
    }
    let name = get_str(&info.action_set_name)
        .filter(|n| name_ok(n))
        .ok_or(xr::Result::ERROR_PATH_FORMAT_INVALID)?;
    if get_str(&info.localized_action_set_name).is_none_or(|n| n.is_empty()) {
        return Err(xr::Result::ERROR_LOCALIZED_NAME_INVALID);
    }
    let id = ACTION_SETS
        .insert_unless(ActionSet::new(name.clone()), |s| s.name == name)
        .ok_or(xr::Result::ERROR_NAME_DUPLICATED)?;
    Ok(xr::ActionSet::from_raw(id))
}

/// `xrDestroyActionSet`: its actions go with it.
pub fn destroy_action_set(set: xr::ActionSet) -> Result<(), xr::Result> {
    let id = set.into_raw();
    let s = ACTION_SETS.get(id)?;
    let mut state = s.state();
    if state.destroyed {
        return Err(xr::Result::ERROR_HANDLE_INVALID);
    }
    state.destroyed = true;
    ACTION_SETS.remove(id)?;
    ACTIONS.retain(|a| a.set != id);
    Ok(())
}

/// The action types the runtime knows.
const ACTION_TYPES: [xr::ActionType; 5] = [
    xr::ActionType::BOOLEAN_INPUT,
    xr::ActionType::FLOAT_INPUT,
    xr::ActionType::VECTOR2F_INPUT,
    xr::ActionType::POSE_INPUT,
    xr::ActionType::VIBRATION_OUTPUT,
];

/// Checks an action's subaction paths: known, top-level user paths, each once.
pub fn subactions_of(inst: &Instance, paths: &[xr::Path]) -> Result<Vec<xr::Path>, xr::Result> {
    let mut subactions = Vec::new();
    for &p in paths {
        match inst.path_str(p) {
            None => return Err(xr::Result::ERROR_PATH_INVALID),
            Some(s) if !s.starts_with("/user/") => return Err(xr::Result::ERROR_PATH_UNSUPPORTED),
            Some(_) if subactions.contains(&p) => return Err(xr::Result::ERROR_PATH_UNSUPPORTED),
            Some(_) => subactions.push(p),
        }
    }
    Ok(subactions)
}

/// `xrCreateAction`: `subaction_paths` are the info's `subactionPaths`.
pub fn create_action(
    set: xr::ActionSet,
    info: &xr::ActionCreateInfo,
    subaction_paths: &[xr::Path],
) -> Result<xr::Action, xr::Result> {
    let sid = set.into_raw();
    let the_set = ACTION_SETS.get(sid)?;
    if the_set.attached() {
        return Err(xr::Result::ERROR_ACTIONSETS_ALREADY_ATTACHED);
    }
    let name = get_str(&info.action_name)
        .filter(|n| name_ok(n))
        .ok_or(xr::Result::ERROR_PATH_FORMAT_INVALID)?;
    if get_str(&info.localized_action_name).is_none_or(|n| n.is_empty()) {
        return Err(xr::Result::ERROR_LOCALIZED_NAME_INVALID);
    }
    if !ACTION_TYPES.contains(&info.action_type) {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    let subactions = {
        let inst = runtime::current().ok_or(xr::Result::ERROR_HANDLE_INVALID)?;
        subactions_of(&inst, subaction_paths)?
    };
    // Under the set's lock: not attached or destroyed meanwhile.
    let state = the_set.state();
    if state.destroyed {
        return Err(xr::Result::ERROR_HANDLE_INVALID);
    }
    if state.attached {
        return Err(xr::Result::ERROR_ACTIONSETS_ALREADY_ATTACHED);
    }
    let action = Action {
        set: sid,
        name: name.clone(),
        ty: info.action_type,
        subactions,
    };
    let id = ACTIONS
        .insert_unless(action, |a| a.set == sid && a.name == name)
        .ok_or(xr::Result::ERROR_NAME_DUPLICATED)?;
    Ok(xr::Action::from_raw(id))
}

/// `xrDestroyAction`.
pub fn destroy_action(action: xr::Action) -> Result<(), xr::Result> {
    ACTIONS.remove(action.into_raw()).map(|_| ())
}

/// The sources suggested for one profile, by action, checked against the profile the
/// runtime feeds (`profile` is a well-formed interaction profile path); None: a profile the
/// runtime does not feed (its suggestions are accepted and not used).
pub fn bindings_for(
    profile: &str,
    list: &[(u64, String)],
) -> Result<Option<HashMap<u64, Vec<String>>>, xr::Result> {
    let check: fn(&str) -> bool = match profile {
        SIMPLE => simple_source_ok,
        XBOX => gamepad::source_ok,
        _ => return Ok(None),
    };
    let mut by_action: HashMap<u64, Vec<String>> = HashMap::new();
    for (action, src) in list {
        if !check(src) {
            log::warn!("xrSuggestInteractionProfileBindings: {src} is not a source of {profile}");
            return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
        }
        by_action.entry(*action).or_default().push(src.clone());
    }
    Ok(Some(by_action))
}

/// `xrSuggestInteractionProfileBindings`: `list` is the info's `suggestedBindings`.
pub fn suggest_bindings(
    instance: xr::Instance,
    profile: xr::Path,
    list: &[xr::ActionSuggestedBinding],
) -> Result<(), xr::Result> {
    if list.is_empty() {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    let inst = runtime::instance(instance)?;
    let profile = inst
        .path_str(profile)
        .ok_or(xr::Result::ERROR_PATH_INVALID)?;
    if !profile.starts_with("/interaction_profiles/") || profile.split('/').count() != 4 {
        return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
    }
    let mut sources = Vec::with_capacity(list.len());
    for b in list {
        let src = inst
            .path_str(b.binding)
            .ok_or(xr::Result::ERROR_PATH_INVALID)?;
        if !src.starts_with("/user/") {
            return Err(xr::Result::ERROR_PATH_UNSUPPORTED);
        }
        sources.push((b.action.into_raw(), src));
    }
    let bindings = bindings_for(&profile, &sources)?;
    for b in list {
        if set_attached(ACTIONS.get(b.action.into_raw())?.set) {
            return Err(xr::Result::ERROR_ACTIONSETS_ALREADY_ATTACHED);
        }
    }
    if let Some(bindings) = bindings {
        let mut st = inst.state();
        if profile == SIMPLE {
            st.bindings.simple = bindings;
        } else {
            st.bindings.gamepad = bindings;
        }
    }
    Ok(())
}

/// `xrAttachSessionActionSets`: `sets` is the info's `actionSets`.
pub fn attach_session_action_sets(
    session: xr::Session,
    sets: &[xr::ActionSet],
) -> Result<(), xr::Result> {
    if sets.is_empty() {
        return Err(xr::Result::ERROR_VALIDATION_FAILURE);
    }
    // Under the session's lock: each set once, in handle order (so two calls holding
    // several sets' locks never wait on each other); all their locks held while none is
    // found destroyed and all are marked attached.
    with_session(session, |s| {
        if !s.attached.is_empty() {
            return Err(xr::Result::ERROR_ACTIONSETS_ALREADY_ATTACHED);
        }
        let objects = sets
            .iter()
            .map(|s| Ok((s.into_raw(), ACTION_SETS.get(s.into_raw())?)))
            .collect::<Result<BTreeMap<_, _>, xr::Result>>()?;
        let mut states: Vec<_> = objects.values().map(|s| s.state()).collect();
        if states.iter().any(|s| s.destroyed) {
            return Err(xr::Result::ERROR_HANDLE_INVALID);
        }
        for s in &mut states {
            s.attached = true;
        }
        drop(states);
        s.attached = sets.iter().map(|s| s.into_raw()).collect();
        Ok(())
    })?;
    runtime::push(Event::InteractionProfileChanged {
        session: session.into_raw(),
    });
    Ok(())
}

/// The interaction profile bound to a top-level user path, given which profiles have
/// suggestions: Some(None) for a known top-level path without one, None for an unknown one.
pub fn profile_for(top: &str, simple: bool, gamepad: bool) -> Option<Option<&'static str>> {
    if HANDS.contains(&top) {
        Some(simple.then_some(SIMPLE))
    } else if top == gamepad::TOP {
        Some(gamepad.then_some(XBOX))
    } else if top == "/user/head" {
        Some(None)
    } else {
        None
    }
}

/// `xrGetCurrentInteractionProfile`: the profile bound to `top` (NULL: none).
pub fn current_interaction_profile(
    session: xr::Session,
    top: xr::Path,
) -> Result<xr::Path, xr::Result> {
    if with_session(session, |s| Ok(s.attached.is_empty()))? {
        return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
    }
    let inst = runtime::current().ok_or(xr::Result::ERROR_HANDLE_INVALID)?;
    let mut st = inst.state();
    let t = st
        .path_str(top)
        .map(str::to_string)
        .ok_or(xr::Result::ERROR_PATH_INVALID)?;
    let b = &st.bindings;
    match profile_for(&t, !b.simple.is_empty(), !b.gamepad.is_empty()) {
        None => Err(xr::Result::ERROR_PATH_UNSUPPORTED),
        Some(None) => Ok(xr::Path::NULL),
        Some(Some(p)) => Ok(st.path(p)),
    }
}

/// `xrSyncActions`: `active` is the info's `activeActionSets`. XR_SESSION_NOT_FOCUSED (and
/// every action inactive) unless the session is focused.
pub fn sync_actions(
    session: xr::Session,
    active: &[xr::ActiveActionSet],
) -> Result<xr::Result, xr::Result> {
    let focused = with_session(session, |s| {
        if active
            .iter()
            .any(|a| !s.attached.contains(&a.action_set.into_raw()))
        {
            return Err(xr::Result::ERROR_ACTIONSET_NOT_ATTACHED);
        }
        s.stream.poll_input();
        let (focused, held) = (s.state == xr::SessionState::FOCUSED, s.stream.held.clone());
        sync(s, focused, &held);
        Ok(focused)
    })?;
    Ok(if focused {
        xr::Result::SUCCESS
    } else {
        xr::Result::SESSION_NOT_FOCUSED
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_input_drives_the_simple_controller() {
        let mut held = Held::default();
        let left = "/user/hand/left/input/select/click";
        let menu = "/user/hand/left/input/menu/click";
        assert_eq!(source_value(left, &held), Some(0.0));
        held.mouse.insert(1);
        assert_eq!(source_value(left, &held), Some(1.0));
        held.keys.insert(KEY_ESCAPE);
        assert_eq!(source_value(menu, &held), Some(1.0));
        held.pad_buttons.push(BTN_START);
        assert_eq!(
            source_value("/user/hand/right/input/menu/click", &held),
            Some(1.0)
        );
        assert_eq!(source_value("/user/hand/left/input/grip/pose", &held), None);
        assert!(simple_source_ok("/user/hand/right/output/haptic"));
        assert!(!simple_source_ok("/user/hand/right/input/trigger/value"));
    }

    #[test]
    fn a_binding_takes_its_strongest_source_and_both_profiles_are_read() {
        assert_eq!(strongest(&[]), (0.0, [0.0, 0.0]));
        assert_eq!(
            strongest(&[[0.2, 0.0], [-0.7, 0.0], [0.5, 0.0]]),
            (-0.7, [-0.7, 0.0])
        );
        assert_eq!(strongest(&[[0.3, 0.3], [0.0, -0.9]]).1, [0.0, -0.9]);
        let mut held = Held::default();
        held.pad_buttons.push(BTN_START);
        held.pad_axes[0] = 0.6;
        let any = |p: &str| any_source_value(p, &held);
        assert_eq!(any("/user/hand/right/input/menu/click"), Some([1.0, 0.0]));
        assert_eq!(any("/user/gamepad/input/menu/click"), Some([1.0, 0.0]));
        assert_eq!(
            any("/user/gamepad/input/thumbstick_left"),
            Some([0.6, -0.0])
        );
        assert_eq!(any("/user/gamepad/output/haptic_left"), None);
        let mut b = Bindings::default();
        b.simple
            .insert(7, vec!["/user/hand/left/input/menu/click".into()]);
        b.gamepad
            .insert(7, vec!["/user/gamepad/input/menu/click".into()]);
        assert_eq!(b.sources(7).len(), 2);
        assert!(b.sources(8).is_empty());
    }

    #[test]
    fn subaction_paths_are_known_user_paths_each_once() {
        let inst = crate::runtime::tests::instance(1);
        let left = inst.path("/user/hand/left");
        let profile = inst.path(SIMPLE);
        assert_eq!(subactions_of(&inst, &[left]), Ok(vec![left]));
        assert_eq!(subactions_of(&inst, &[]), Ok(vec![]));
        assert_eq!(
            subactions_of(&inst, &[left, left]),
            Err(xr::Result::ERROR_PATH_UNSUPPORTED)
        );
        assert_eq!(
            subactions_of(&inst, &[profile]),
            Err(xr::Result::ERROR_PATH_UNSUPPORTED)
        );
        assert_eq!(
            subactions_of(&inst, &[xr::Path::from_raw(99)]),
            Err(xr::Result::ERROR_PATH_INVALID)
        );
    }

    #[test]
    fn suggestions_are_checked_against_the_profiles_the_runtime_feeds() {
        let list = |src: &str| vec![(5u64, src.to_string())];
        let got = bindings_for(SIMPLE, &list("/user/hand/left/input/select/click")).unwrap();
        assert_eq!(
            got.unwrap().get(&5).map(Vec::len),
            Some(1),
            "kept for the simple controller"
        );
        assert_eq!(
            bindings_for(SIMPLE, &list("/user/hand/left/input/trigger/value")),
            Err(xr::Result::ERROR_PATH_UNSUPPORTED)
        );
        assert!(bindings_for(XBOX, &list("/user/gamepad/input/a/click"))
            .unwrap()
            .is_some());
        // Another profile's suggestions are accepted, whatever their sources, and not used.
        assert_eq!(
            bindings_for(
                "/interaction_profiles/valve/index_controller",
                &list("/user/hand/left/input/trigger/value")
            ),
            Ok(None)
        );
    }

    #[test]
    fn the_current_profile_is_the_one_with_suggestions() {
        assert_eq!(
            profile_for("/user/hand/left", true, false),
            Some(Some(SIMPLE))
        );
        assert_eq!(profile_for("/user/hand/right", false, true), Some(None));
        assert_eq!(profile_for("/user/gamepad", false, true), Some(Some(XBOX)));
        assert_eq!(profile_for("/user/head", true, true), Some(None));
        assert_eq!(profile_for("/user/foot", true, true), None);
    }

    #[test]
    fn action_sets_and_actions_live_and_die_through_the_core() {
        use crate::runtime::tests::{install_instance, INSTANCE_SLOT};
        use crate::util::put_str;
        let _slot = INSTANCE_SLOT.lock().unwrap_or_else(|p| p.into_inner());
        let inst = install_instance();
        let id = inst.into_raw();
        let path = |s: &str| crate::instance::string_to_path(inst, s).unwrap();
        let mut set_info = xr::ActionSetCreateInfo {
            ty: xr::StructureType::ACTION_SET_CREATE_INFO,
            next: std::ptr::null(),
            action_set_name: [0; xr::MAX_ACTION_SET_NAME_SIZE],
            localized_action_set_name: [0; xr::MAX_LOCALIZED_ACTION_SET_NAME_SIZE],
            priority: 0,
        };
        put_str(&mut set_info.action_set_name, "Gameplay");
        put_str(&mut set_info.localized_action_set_name, "Gameplay");
        assert_eq!(
            create_action_set(inst, &set_info).err(),
            Some(xr::Result::ERROR_PATH_FORMAT_INVALID)
        );
        put_str(&mut set_info.action_set_name, "gameplay");
        let set = create_action_set(inst, &set_info).unwrap();
        assert_eq!(
            create_action_set(inst, &set_info).err(),
            Some(xr::Result::ERROR_NAME_DUPLICATED)
        );
        let left = path("/user/hand/left");
        let mut info = xr::ActionCreateInfo {
            ty: xr::StructureType::ACTION_CREATE_INFO,
            next: std::ptr::null(),
            action_name: [0; xr::MAX_ACTION_NAME_SIZE],
            action_type: xr::ActionType::BOOLEAN_INPUT,
            count_subaction_paths: 0,
            subaction_paths: std::ptr::null(),
            localized_action_name: [0; xr::MAX_LOCALIZED_ACTION_NAME_SIZE],
        };
        put_str(&mut info.action_name, "select");
        put_str(&mut info.localized_action_name, "Select");
        let action = create_action(set, &info, &[left]).unwrap();
        assert_eq!(
            create_action(set, &info, &[left]).err(),
            Some(xr::Result::ERROR_NAME_DUPLICATED)
        );
        let bind = |src: &str| xr::ActionSuggestedBinding {
            action,
            binding: path(src),
        };
        let simple = path(SIMPLE);
        assert_eq!(
            suggest_bindings(inst, simple, &[bind("/user/hand/left/input/select/click")]),
            Ok(())
        );
        assert_eq!(
            suggest_bindings(inst, simple, &[bind("/user/hand/left/input/trigger/value")]),
            Err(xr::Result::ERROR_PATH_UNSUPPORTED)
        );
        assert_eq!(
            suggest_bindings(inst, simple, &[]),
            Err(xr::Result::ERROR_VALIDATION_FAILURE)
        );
        // Handles from another kind, or never made, are invalid.
        assert_eq!(
            destroy_action(xr::Action::from_raw(set.into_raw())),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert_eq!(
            attach_session_action_sets(xr::Session::from_raw(id), &[set]),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        // The set takes its actions with it; a destroyed handle stays invalid.
        assert_eq!(destroy_action_set(set), Ok(()));
        assert_eq!(
            destroy_action(action),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert_eq!(
            destroy_action_set(set),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
        assert_eq!(crate::instance::destroy_instance(inst), Ok(()));
        assert_eq!(
            crate::instance::destroy_instance(inst),
            Err(xr::Result::ERROR_HANDLE_INVALID)
        );
    }
}
