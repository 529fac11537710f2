# frozen_string_literal: true

# The Ruby (RuboCop, .rubocop.yml) and the C (clang-format, .clang-format): `rake lint` changes nothing,
# it says what does not follow the configuration.
LINT_RUBY = %w[lib exe spec tasks bench script Rakefile Gemfile ptmalloc_dump.gemspec].freeze
LINT_C = Dir["ext/**/*.{c,h}", "fuzz/*.c", "test/unit/*.{c,h}"].sort

namespace :lint do
  desc "RuboCop over the Ruby files (.rubocop.yml)"
  task :ruby do
    sh "rubocop", *LINT_RUBY
  end

  desc "clang-format --dry-run over the C files (.clang-format)"
  task :c do
    unless system("clang-format", "--version", out: File::NULL, err: File::NULL)
      abort "rake lint:c: clang-format is not installed (bin/setup installs it; on Debian: " \
            "apt-get install clang-format)"
    end
    sh "clang-format", "--dry-run", "-Werror", *LINT_C, verbose: false
  end
end

desc "Check the Ruby with RuboCop and the C with clang-format (lint:ruby, lint:c)"
task lint: %w[lint:ruby lint:c]
