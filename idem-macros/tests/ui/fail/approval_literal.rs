// An approval cannot be written as a struct literal: only an `Approver` signs one.
use idem::Approval;

fn main() {
    let _forged = Approval {
        tool: "wire_money".into(),
    };
}
