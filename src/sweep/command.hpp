// Command templates: `python train.py --lr {lr} --out runs/{trial}`, filled per trial.
//
//   {name}      the parameter's value: verbatim in an argv; in a /bin/sh script a reference to
//               the environment variable HERD_P_<name> that holds it (fill_script), so the shell
//               never evaluates a value, whatever quotes the template puts around it
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

/// Fills the placeholders with `values`; `quote` shell-quotes each value (for display: inside
/// the template's own double quotes a quoted value is still expanded by a shell; fill_script
/// is what runs). @throws std::invalid_argument naming a placeholder that `values` lacks.
std::string fill_template(std::string_view tmpl, const std::map<std::string, std::string>& values, bool quote);

/// The script a trial runs: each placeholder becomes a reference to HERD_P_<name>, written for
/// where it stands (outside quotes "${HERD_P_x}", inside double quotes ${HERD_P_x}, inside
/// single quotes '"${HERD_P_x}"'), and `env` gets HERD_P_<name> = value. A shell substitutes a
/// variable's value but never evaluates it: `$(touch X)`, backquotes or `"; touch X; "` as
/// values stay text. @throws std::invalid_argument naming a placeholder that `values` lacks.
std::string fill_script(std::string_view tmpl, const std::map<std::string, std::string>& values,
                        std::map<std::string, std::string>& env);

}  // namespace herd::sweep
