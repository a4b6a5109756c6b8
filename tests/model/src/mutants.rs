//! Broken versions of the protocol, one fault each: the checks must find
//! every one of them, or they prove nothing.

/// One deliberate fault in the store or the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// `complete` stores the response whatever token the record holds
    /// (complete.lua with `fenced` always true).
    CompleteUnfenced,
    /// A claim that finds a lease lapsed takes it over (or holds it) at
    /// once, without giving its holder a grace.
    NoGrace,
    /// A claim takes a lapsed execution over whatever the lapse policy
    /// (`hold` ignored).
    TakeoverUnderHold,
    /// A takeover hands back no recorded steps (and forgets them).
    TakeoverDropsSteps,
    /// An operator's write applies to whatever execution the record holds:
    /// without the token and state it inspected, and whatever its lease.
    SettleUnfenced,
    /// A holder whose lease lapsed once starts its next step without
    /// reading its record (`Steps::confirmed` without the read).
    NoReadAfterLapse,
    /// The keeper counts a confirmed renewal's lease from when its answer
    /// came, not from when it was sent (`LeaseState::confirm`).
    LeaseFromAnswer,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 7] = [
        Mutant::CompleteUnfenced,
        Mutant::NoGrace,
        Mutant::TakeoverUnderHold,
        Mutant::TakeoverDropsSteps,
        Mutant::SettleUnfenced,
        Mutant::NoReadAfterLapse,
        Mutant::LeaseFromAnswer,
    ];
}
