// Search spaces (grids, random draws, both), herd::param<T>, and the rung budgets of
// successive halving: pure, in-process.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include <herd/sweep.hpp>

namespace {

double num(const herd::Params& p, const std::string& name) { return herd::param<double>(p, name); }

}  // namespace

TEST_CASE("Sweep.Space.GridIsTheCrossProductInRowMajorOrder" * doctest::timeout(10)) {
  const auto trials = herd::SearchSpace{}.grid("lr", {"0.1", "0.01"}).grid("batch", {"32", "64", "128"}).expand();
  REQUIRE(trials.size() == 6);
  CHECK(trials[0] == herd::Params{{"lr", "0.1"}, {"batch", "32"}});
  CHECK(trials[1] == herd::Params{{"lr", "0.1"}, {"batch", "64"}});
  CHECK(trials[2] == herd::Params{{"lr", "0.1"}, {"batch", "128"}});
  CHECK(trials[3] == herd::Params{{"lr", "0.01"}, {"batch", "32"}});
  CHECK(trials[5] == herd::Params{{"lr", "0.01"}, {"batch", "128"}});
}

TEST_CASE("Sweep.Space.NumericGridIsWrittenShortest" * doctest::timeout(10)) {
  const auto trials = herd::SearchSpace{}.grid("lr", {0.1, 1e-4, 32}).expand();
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].at("lr") == "0.1");
  CHECK(std::stod(trials[1].at("lr")) == 1e-4);
  CHECK(trials[2].at("lr") == "32");
  const std::vector<double> v = {1, 2.5};
  CHECK(herd::SearchSpace{}.grid("w", v).expand().back().at("w") == "2.5");
}

TEST_CASE("Sweep.Space.RandomDrawsAreInRangeAndReproducible" * doctest::timeout(10)) {
  auto space = herd::SearchSpace{}
                   .uniform("x", -2, 3)
                   .log_uniform("lr", 1e-5, 1e-1)
                   .integer("layers", 1, 4)
                   .choice("act", {"relu", "tanh", "gelu"})
                   .samples(500)
                   .seed(42);
  const auto a = space.expand();
  const auto b = space.expand();
  CHECK(a == b);
  CHECK(a.size() > 450);  // duplicates are dropped, but real-valued draws rarely collide
  std::set<std::string> acts;
  std::set<long> layers;
  int low_decade = 0, high_decade = 0;
  for (const auto& p : a) {
    const double x = num(p, "x"), lr = num(p, "lr");
    CHECK(x >= -2);
    CHECK(x <= 3);
    CHECK(lr >= 1e-5);
    CHECK(lr <= 1e-1);
    const long l = herd::param<long>(p, "layers");
    CHECK(l >= 1);
    CHECK(l <= 4);
    layers.insert(l);
    acts.insert(p.at("act"));
    low_decade += lr < 1e-4;
    high_decade += lr >= 1e-2;
    // Rounded when drawn: what the trial sees is what is recorded.
    CHECK(p.at("lr").size() <= 12);
  }
  CHECK(layers == std::set<long>{1, 2, 3, 4});
  CHECK(acts == std::set<std::string>{"gelu", "relu", "tanh"});
  // Log-uniform: each decade gets about a quarter of the draws.
  CHECK(low_decade > 80);
  CHECK(high_decade > 80);
  // Another seed, other draws.
  CHECK(herd::SearchSpace{space}.seed(43).expand() != a);
}

TEST_CASE("Sweep.Space.MoreSamplesKeepTheEarlierDraws" * doctest::timeout(10)) {
  const auto small = herd::SearchSpace{}.uniform("x", 0, 1).log_uniform("y", 1, 100).samples(5).seed(7).expand();
  const auto big = herd::SearchSpace{}.uniform("x", 0, 1).log_uniform("y", 1, 100).samples(20).seed(7).expand();
  REQUIRE(small.size() == 5);
  REQUIRE(big.size() == 20);
  for (std::size_t i = 0; i < small.size(); ++i) CHECK(small[i] == big[i]);
  // A new dimension does not change the draws of the others.
  const auto more = herd::SearchSpace{}.uniform("x", 0, 1).log_uniform("y", 1, 100).uniform("z", 0, 1).samples(5).seed(7).expand();
  for (std::size_t i = 0; i < small.size(); ++i) CHECK(more[i].at("x") == small[i].at("x"));
}

TEST_CASE("Sweep.Space.GridTimesSamplesSharesTheDraws" * doctest::timeout(10)) {
  const auto trials = herd::SearchSpace{}.grid("batch", {"32", "64"}).log_uniform("lr", 1e-4, 1e-1).samples(3).seed(1).expand();
  REQUIRE(trials.size() == 6);
  for (int i = 0; i < 3; ++i) {
    CHECK(trials[i].at("batch") == "32");
    CHECK(trials[3 + i].at("batch") == "64");
    CHECK(trials[i].at("lr") == trials[3 + i].at("lr"));  // the same draws for every grid point
  }
}

TEST_CASE("Sweep.Space.DuplicatesRunOnce" * doctest::timeout(10)) {
  const auto trials = herd::SearchSpace{}.integer("n", 1, 3).samples(50).seed(3).expand();
  CHECK(trials.size() == 3);
  const auto grid = herd::SearchSpace{}.grid("a", {"1", "1", "2"}).expand();
  CHECK(grid.size() == 2);
}

TEST_CASE("Sweep.Space.ParsesTheCommandLineForms" * doctest::timeout(10)) {
  herd::SearchSpace space;
  space.parse("lr=0.1,0.01", true)
      .parse("wd=loguniform:1e-6:1e-2", false)
      .parse("drop=uniform:0:0.5", false)
      .parse("layers=int:2:6", false)
      .parse("act=choice:relu,tanh", false)
      .samples(20);
  const auto& d = space.dimensions();
  REQUIRE(d.size() == 5);
  CHECK(d[0].values == std::vector<std::string>{"0.1", "0.01"});
  CHECK(d[1].kind == herd::SearchSpace::Dimension::Kind::log_uniform);
  CHECK(d[1].low == 1e-6);
  CHECK(d[2].high == 0.5);
  CHECK(d[3].kind == herd::SearchSpace::Dimension::Kind::integer);
  CHECK(d[4].values == std::vector<std::string>{"relu", "tanh"});
  CHECK(space.expand().size() == 40);

  CHECK_THROWS_AS(herd::SearchSpace{}.parse("lr", true), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("lr=0.1,,0.2", true), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("lr=normal:0:1", false), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("lr=uniform:1", false), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("lr=loguniform:0:1", false), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("n=int:1.5:3", false), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("x=uniform:2:1", false), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.parse("bad-name=1,2", true), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.grid("trial", {"1"}), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.grid("a", {"1"}).grid("a", {"2"}), std::invalid_argument);
  CHECK_THROWS_AS(herd::SearchSpace{}.samples(0), std::invalid_argument);
}

TEST_CASE("Sweep.Params.ParseOrNameTheProblem" * doctest::timeout(10)) {
  const herd::Params p{{"lr", "0.01"}, {"epochs", "30"}, {"wide", "true"}, {"n", "32.0"}, {"name", "a b"}};
  CHECK(herd::param<double>(p, "lr") == doctest::Approx(0.01));
  CHECK(herd::param<int>(p, "epochs") == 30);
  CHECK(herd::param<long>(p, "n") == 32);  // a whole number from a numeric grid
  CHECK(herd::param<bool>(p, "wide"));
  CHECK(herd::param<std::string>(p, "name") == "a b");
  CHECK_THROWS_WITH_AS(herd::param<double>(p, "momentum"), doctest::Contains("momentum"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(herd::param<int>(p, "lr"), doctest::Contains("'lr' = '0.01'"), std::invalid_argument);
  CHECK_THROWS_AS(herd::param<unsigned char>(herd::Params{{"x", "300"}}, "x"), std::invalid_argument);
  CHECK(herd::param<int>(herd::Params{{"x", "-3"}}, "x") == -3);
}

TEST_CASE("Sweep.Halving.Rungs" * doctest::timeout(10)) {
  CHECK(herd::SuccessiveHalving{}.budgets(1, 27).eta(3).rungs() == std::vector<double>{1, 3, 9, 27});
  CHECK(herd::SuccessiveHalving{}.budgets(1, 10).eta(3).rungs() == std::vector<double>{1, 3, 9, 10});
  CHECK(herd::SuccessiveHalving{}.budgets(2, 2).rungs() == std::vector<double>{2});
  CHECK(herd::SuccessiveHalving{}.budgets(0.1, 0.9).eta(3).rungs() == std::vector<double>{0.1, 0.3, 0.9});
  CHECK_THROWS_AS(herd::SuccessiveHalving{}.budgets(0, 9).rungs(), std::invalid_argument);
  CHECK_THROWS_AS(herd::SuccessiveHalving{}.budgets(9, 1).rungs(), std::invalid_argument);
  CHECK_THROWS_AS(herd::SuccessiveHalving{}.eta(1).rungs(), std::invalid_argument);
  CHECK_THROWS_AS(herd::SuccessiveHalving{}.parameter("a b").rungs(), std::invalid_argument);
}
