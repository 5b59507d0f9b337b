// The Runner defaults for runners that do not overlap steps.
#include "engine/runner.h"

namespace tern {

Status Runner::launch(const StepPlan&) { return unsupported("this runner does not overlap steps"); }
Status Runner::collect(StepOutput&) { return unsupported("this runner does not overlap steps"); }

}  // namespace tern
