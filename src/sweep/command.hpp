// Command templates: `python train.py --lr {lr} --out runs/{trial}`, filled per trial.
//
//   {name}      the parameter's value (shell-quoted in a script, verbatim in an argv)
//   {{ and }}   literal braces
//   ${...}      left to the shell, untouched
//   {other}     any other brace text that is not a bare name stays as written ({a,b}, awk's
//               {print $1}); a bare name that is no parameter is an error, to catch typos.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace herd::sweep {

/// The placeholders (bare names in braces) of a template.
std::set<std::string> placeholders(std::string_view tmpl);

/// Fills the placeholders with `values`; `quote` shell-quotes each value.
/// @throws std::invalid_argument naming a placeholder that `values` lacks.
std::string fill_template(std::string_view tmpl, const std::map<std::string, std::string>& values, bool quote);

}  // namespace herd::sweep
