# frozen_string_literal: true

require "spec_helper"

RSpec.describe "the gem" do
  it "builds, installs (compiling the extension) and dumps from any directory" do
    gem_home = File.join(tmpdir, "gems")
    Dir.chdir(SpecHelpers::ROOT) do
      out, err, status = Open3.capture3("gem", "build", "ptmalloc_dump.gemspec", "--output", File.join(tmpdir, "ptmalloc_dump.gem"))
      expect(status).to be_success, out + err
    end
    # as a user's shell would have it: no Bundler (RubyGems 3.4+ loads BUNDLER_SETUP by itself)
    env = ENV.keys.grep(/\ABUNDLE/).to_h { |k| [k, nil] }.merge("GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "RUBYOPT" => nil)
    out, err, status = Open3.capture3(env, "gem", "install", "--local", "--no-document", File.join(tmpdir, "ptmalloc_dump.gem"))
    expect(status).to be_success, out + err
    dump = File.join(tmpdir, "x.dump")
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-rptmalloc_dump", "-e", "p PtmallocDump.dump(#{dump.inspect})[:arena]", chdir: "/")
    expect(status).to be_success, err
    expect(out.to_i).to be > 0
    out, err, status = Open3.capture3(env, File.join(gem_home, "bin", "ptmalloc-visualize"), "--summary", dump, chdir: "/")
    expect(status).to be_success, err
    expect(out).to include("verify: verified")
  end
end
