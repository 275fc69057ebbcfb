"""Accounts: the profile page (username, an optional email), changing the password, and
resetting a forgotten one by email, each behind rate limits (common/ratelimits.py).

Django's own views do the work (tokens, session hash update, the reset form that answers
the same whether or not an address is known); the functions here put the limits in front
of them. Learners without an email get a reset link from an operator:
`python -m manage reset_link <username>` (trainer/management/commands/reset_link.py).
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.base_user import BaseUserManager
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm, PasswordResetForm
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters

from common import ratelimits

EMAIL_MAX_CHARS = User._meta.get_field("email").max_length  # 254, RFC 5321's path limit


def reset_link_lifetime() -> str:
    """PASSWORD_RESET_TIMEOUT in words: '1 hour', '30 minutes', '3 days'."""
    seconds = int(settings.PASSWORD_RESET_TIMEOUT)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"


# --- profile: the email address ---------------------------------------------------------------


class EmailForm(forms.Form):
    """An optional email address; changing it (or removing it) asks for the current
    password, so a borrowed session cannot point the reset emails somewhere else."""

    email = forms.EmailField(
        label="Email address",
        required=False,
        max_length=EMAIL_MAX_CHARS,
        widget=forms.EmailInput(attrs={"autocomplete": "email"}),
    )
    current_password = forms.CharField(
        label="Current password",
        required=False,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )

    def __init__(self, user, *args, **kwargs):
        self.user = user
        kwargs.setdefault("initial", {"email": user.email})
        super().__init__(*args, **kwargs)

    def clean_email(self) -> str:
        return BaseUserManager.normalize_email(self.cleaned_data["email"].strip())

    def clean(self):
        cleaned = super().clean()
        if "email" in cleaned and cleaned["email"] != self.user.email:
            password = cleaned.get("current_password") or ""
            if not password:
                self.add_error(
                    "current_password", "Enter your current password to change the address."
                )
            elif not self.user.check_password(password):
                self.add_error("current_password", "Your current password was entered incorrectly.")
        return cleaned

    @property
    def changed_email(self) -> bool:
        return self.cleaned_data["email"] != self.user.email


@sensitive_post_parameters("current_password")
@never_cache
@login_required
def profile(request: HttpRequest) -> HttpResponse:
    user = request.user
    form = EmailForm(user, request.POST if request.method == "POST" else None)
    context = {"form": form, "reset_lifetime": reset_link_lifetime()}
    if request.method == "POST":
        # Each post may test a password: it counts with the password changes.
        limited = ratelimits.hit(request, "password-change", ratelimits.user_id)
        if limited:
            kept = EmailForm(user, initial={"email": request.POST.get("email", "")})
            context |= {"form": kept, "rate_limited": ratelimits.password_check_message(limited)}
            response = render(request, "accounts/profile.html", context)
            return ratelimits.with_retry_after(response, limited)
        if form.is_valid():
            if form.changed_email:
                user.email = form.cleaned_data["email"]
                user.save(update_fields=["email"])
                if user.email:
                    messages.success(request, f"Saved: reset links now go to {user.email}.")
                else:
                    messages.success(request, "Saved: your account has no email address now.")
            else:
                messages.info(request, "Nothing to save: that is already your address.")
            return redirect("profile")
    return render(request, "accounts/profile.html", context, status=400 if form.errors else 200)


# --- changing the password -------------------------------------------------------------------


class _PasswordChange(auth_views.PasswordChangeView):
    # Own template names: the admin's password pages use the registration/ ones.
    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("profile")

    def form_valid(self, form):
        response = super().form_valid(form)  # keeps this session signed in, not the others
        messages.success(
            self.request,
            "Your password was changed. Other browsers signed in to this account are signed out.",
        )
        return response


_password_change = _PasswordChange.as_view()


@sensitive_post_parameters()
@csrf_protect
@never_cache
@login_required
def password_change(request: HttpRequest) -> HttpResponse:
    """Django's PasswordChangeView behind the per-learner limit on password checks."""
    if request.method == "POST":
        limited = ratelimits.hit(request, "password-change", ratelimits.user_id)
        if limited:
            context = {
                "form": PasswordChangeForm(request.user),
                "rate_limited": ratelimits.password_check_message(limited),
            }
            response = render(request, "accounts/password_change.html", context)
            return ratelimits.with_retry_after(response, limited)
    return _password_change(request)


# --- resetting a forgotten password ----------------------------------------------------------


class _PasswordReset(auth_views.PasswordResetView):
    template_name = "accounts/password_reset_form.html"
    email_template_name = "accounts/password_reset_email.txt"
    subject_template_name = "accounts/password_reset_subject.txt"

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {"reset_lifetime": reset_link_lifetime()}

    def form_valid(self, form):
        self.extra_email_context = {"reset_lifetime": reset_link_lifetime()}
        return super().form_valid(form)


_password_reset = _PasswordReset.as_view()


@csrf_protect
@never_cache
def password_reset(request: HttpRequest) -> HttpResponse:
    """Ask for a reset link by email. Limited per client address and per address asked for
    (so one inbox cannot be flooded); the answer is the same whether or not an account has
    that address, the 429 included (it counts requests, not accounts)."""
    if request.method == "POST":
        by_ip = ratelimits.hit(request, "reset-ip", ratelimits.client_ip)
        by_email = ratelimits.hit(request, "reset-email", ratelimits.posted_email)
        limited = by_email or by_ip
        if limited:
            context = {
                "form": PasswordResetForm(initial={"email": request.POST.get("email", "")}),
                "rate_limited": ratelimits.reset_message(limited),
                "reset_lifetime": reset_link_lifetime(),
            }
            response = render(request, "accounts/password_reset_form.html", context)
            return ratelimits.with_retry_after(response, limited)
    return _password_reset(request)


def password_reset_done(request: HttpRequest) -> HttpResponse:
    return auth_views.PasswordResetDoneView.as_view(
        template_name="accounts/password_reset_sent.html",
        extra_context={"reset_lifetime": reset_link_lifetime()},
    )(request)


_password_reset_confirm = auth_views.PasswordResetConfirmView.as_view(
    template_name="accounts/password_reset_confirm.html"
)


@sensitive_post_parameters()
@never_cache
def password_reset_confirm(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """Open a reset link and set the new password: every request counts per client address
    (the token is what a guesser would be guessing)."""
    limited = ratelimits.hit(request, "reset-confirm-ip", ratelimits.client_ip)
    if limited:
        message = ratelimits.reset_confirm_message(limited)
        return ratelimits.too_many(request, limited, message, back=reverse("password_reset"))
    return _password_reset_confirm(request, uidb64=uidb64, token=token)


password_reset_complete = auth_views.PasswordResetCompleteView.as_view(
    template_name="accounts/password_reset_complete.html"
)
