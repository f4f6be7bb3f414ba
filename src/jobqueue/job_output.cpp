#include "jobqueue/job_output.hpp"

#include <glob.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace herd::jobqueue {
namespace {

std::string user_name() {
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr) return pw->pw_name;
  return std::to_string(::getuid());
}

/// Glob metacharacters in literal parts of a pattern must not match anything else.
std::string glob_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string expand(const std::string& pattern, const std::string& job_id, const std::string& job_name,
                   const std::string& submit_dir, bool& wildcard) {
  const auto us = job_id.find('_');
  const std::string array_id = job_id.substr(0, us);
  const std::string index = us == std::string::npos ? "0" : job_id.substr(us + 1);
  std::string out;
  auto lit = [&](const std::string& s) { out += glob_escape(s); };
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '%' || i + 1 >= pattern.size()) {
      lit(std::string(1, c));
      continue;
    }
    // %5a: a zero-padding width may sit between % and the letter.
    std::size_t j = i + 1;
    int width = 0;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j]))) width = width * 10 + (pattern[j++] - '0');
    if (j >= pattern.size()) break;
    auto pad = [&](std::string v) {
      while (static_cast<int>(v.size()) < width) v.insert(v.begin(), '0');
      return v;
    };
    switch (pattern[j]) {
      case '%': lit("%"); break;
      case 'A': lit(pad(array_id)); break;
      case 'a': lit(pad(index)); break;
      case 'j':
        // A plain job's id is known; an array task's own job id is not (squeue %A would say).
        if (us == std::string::npos) {
          lit(pad(job_id));
        } else {
          out += "*";
          wildcard = true;
        }
        break;
      case 'x': lit(job_name); break;
      case 'u': lit(user_name()); break;
      default:  // %N, %n, %s, %t: node name, step, task: any text
        out += "*";
        wildcard = true;
    }
    i = j;
  }
  if (!out.empty() && out[0] != '/') out = glob_escape(submit_dir) + "/" + out;
  return out;
}

std::string resolve(const std::string& glob_pattern, bool wildcard) {
  if (!wildcard) {
    // Unescape: no glob needed.
    std::string plain;
    for (std::size_t i = 0; i < glob_pattern.size(); ++i) {
      if (glob_pattern[i] == '\\' && i + 1 < glob_pattern.size()) ++i;
      plain += glob_pattern[i];
    }
    return plain;
  }
  glob_t g{};
  std::string best;
  if (::glob(glob_pattern.c_str(), 0, nullptr, &g) == 0) {
    struct timespec newest {};
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st {};
      if (::stat(g.gl_pathv[i], &st) != 0) continue;
      if (best.empty() || st.st_mtim.tv_sec > newest.tv_sec) {
        best = g.gl_pathv[i];
        newest = st.st_mtim;
      }
    }
  }
  ::globfree(&g);
  return best;
}

}  // namespace

OutputPatterns sbatch_output_patterns(const std::string& script) {
  OutputPatterns p;
  std::istringstream in(script);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#SBATCH", 0) != 0) {
      // Slurm stops reading #SBATCH lines at the first command.
      if (!line.empty() && line[0] != '#') break;
      continue;
    }
    std::istringstream words(line.substr(7));
    std::string opt;
    while (words >> opt) {
      std::string* target = nullptr;
      std::string value;
      for (const auto& [name, field] : {std::pair{std::string("--output"), &p.output}, std::pair{std::string("--error"), &p.error}}) {
        if (opt.rfind(name + "=", 0) == 0) {
          target = field;
          value = opt.substr(name.size() + 1);
        } else if (opt == name || opt == name.substr(1, 2)) {  // "--output X" or "-o X"
          target = field;
          words >> value;
        } else if (opt.size() > 2 && opt.rfind(name.substr(1, 2), 0) == 0) {  // "-oX"
          target = field;
          value = opt.substr(2);
        }
      }
      if (target != nullptr && !value.empty()) *target = value;
    }
  }
  return p;
}

std::vector<std::string> slurm_output_files(const OutputPatterns& patterns, const std::string& job_id,
                                            const std::string& job_name, const std::string& submit_dir) {
  const std::string out_pattern = patterns.output.empty() ? "slurm-%A_%a.out" : patterns.output;
  std::vector<std::string> files;
  auto file = [&](const std::string& pattern) {
    bool wildcard = false;  // set by expand(): evaluated before resolve() is called
    const std::string glob_pattern = expand(pattern, job_id, job_name, submit_dir, wildcard);
    return resolve(glob_pattern, wildcard);
  };
  const std::string out = file(out_pattern);
  if (!out.empty()) files.push_back(out);
  if (!patterns.error.empty()) {
    const std::string err = file(patterns.error);
    if (!err.empty() && err != out) files.push_back(err);
  }
  return files;
}

std::vector<std::string> last_lines(const std::string& path, std::size_t lines, std::size_t max_bytes,
                                    std::size_t* dropped) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(start);
  std::string text(static_cast<std::size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  std::vector<std::string> all;
  std::size_t pos = 0;
  if (start > 0) pos = text.find('\n') == std::string::npos ? text.size() : text.find('\n') + 1;  // a cut line
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    all.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  const std::size_t k = std::min(lines, all.size());
  if (dropped != nullptr) *dropped = all.size() - k;
  return std::vector<std::string>(all.end() - static_cast<std::ptrdiff_t>(k), all.end());
}

}  // namespace herd::jobqueue
